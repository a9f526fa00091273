import { Storage } from '@google-cloud/storage';
import type { ServiceAccountCredentials } from './credentials.ts';

/**
 * A Cloud Storage client (JSON API). With a service account key (the control plane's, from the
 * secret the stack names) it signs V4 URLs locally with that key; without one it uses the
 * machine's own service account (a GCP machine's agent, through its metadata server).
 */
export function gcsStorage(options: { credentials?: ServiceAccountCredentials; projectId?: string; apiEndpoint?: string } = {}): Storage {
  return new Storage({
    ...(options.credentials ? { credentials: options.credentials } : {}),
    ...(options.projectId ? { projectId: options.projectId } : {}),
    ...(options.apiEndpoint ? { apiEndpoint: options.apiEndpoint, useAuthWithCustomEndpoint: true } : {}),
  });
}
