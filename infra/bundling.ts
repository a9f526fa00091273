/**
 * Packages only the GCP adapter loads (the reconcile entry imports it lazily, when GCP projects
 * are configured). Without GCP they are left out of the bundle: the Compute client's API
 * description alone is about 4 MB.
 */
export const GCP_ONLY_MODULES: readonly string[] = [
  '@google-cloud/compute',
  'google-gax',
  'google-auth-library',
  '@aws-sdk/client-secrets-manager',
];
