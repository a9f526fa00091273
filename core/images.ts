/**
 * Which container images a team's spec may name. A machine's engine dials whatever registry a
 * spec names and puts what it answers in the job's log, so a spec naming an address (the VPC's,
 * the node's own, a metadata server's) would be a port probe: those are refused whatever the
 * config says. The fleet config may then name the registries specs may use at all, and the
 * repositories only some teams may run (another team's private images: the machine's engine pulls
 * each attempt's image afresh, so what one team pulled is never run by another on the strength of
 * the cache alone).
 */

import * as z from 'zod/mini';
import './schema.ts';
import { isValidTeamId } from './budget.ts';

/** The registry and repository of an image reference, as docker reads it. */
export interface ImageName {
  /** `host[:port]`, lower-case; `docker.io` for a reference without one. */
  readonly registry: string;
  /** The path within the registry (`library/` added to a one-part Docker Hub name), without tag or digest. */
  readonly repository: string;
}

/** The fleet config's rules on images (infra/config.ts `images`). */
export interface ImagePolicy {
  /** The registries specs may name (`host[:port]`, `docker.io` for Docker Hub); absent: any registry named by a DNS name. */
  readonly registries?: readonly string[];
  /**
   * Repositories only the named teams may run: `registry/repository`, with a trailing `*` for every
   * repository under a prefix (`123456789012.dkr.ecr.us-east-1.amazonaws.com/nlp/*`).
   */
  readonly teamRepositories?: readonly { readonly repositories: string; readonly teams: readonly string[] }[];
  /**
   * The teams whose specs may ask to run a root image as root (`container.runAsRoot`); absent: none.
   * Every other container whose image names root runs as uid 65534 (core/job-spec.ts `containerUser`).
   */
  readonly rootTeams?: readonly string[];
}

export const DOCKER_HUB = 'docker.io';

/** Splits a reference (already checked for shape by the spec's schema) into its registry and repository. */
export function imageName(image: string): ImageName {
  const withoutDigest = image.split('@')[0]!;
  const slash = withoutDigest.indexOf('/');
  const first = slash < 0 ? '' : withoutDigest.slice(0, slash);
  // Docker's rule: the first part names a registry when it holds "." or ":", or is "localhost".
  const hasRegistry = first !== '' && (first.includes('.') || first.includes(':') || first === 'localhost');
  const rest = hasRegistry ? withoutDigest.slice(slash + 1) : withoutDigest;
  // A tag follows the last ":" after the last "/".
  const lastSlash = rest.lastIndexOf('/');
  const colon = rest.indexOf(':', lastSlash + 1);
  const path = colon < 0 ? rest : rest.slice(0, colon);
  const registry = hasRegistry ? first.toLowerCase() : DOCKER_HUB;
  const repository = registry === DOCKER_HUB && !path.includes('/') ? `library/${path}` : path;
  return { registry: registry === 'index.docker.io' || registry === 'registry-1.docker.io' ? DOCKER_HUB : registry, repository };
}

/** Why a registry host may never be named (an address, loopback, link-local, a metadata server's name), or undefined. */
export function registryHostProblem(registry: string): string | undefined {
  const host = registry.startsWith('[') ? registry.slice(1, registry.indexOf(']')) : registry.replace(/:\d+$/, '');
  if (/^\d+(\.\d+){3}$/.test(host) || host.includes(':'))
    return `names the registry by the address ${host}; name it by its DNS name (an address would let a spec probe the network the machines sit on)`;
  if (host === 'localhost' || host.endsWith('.localhost'))
    return `names a registry on the machine itself (${host}); a job's image comes from a registry the fleet reaches`;
  if (host === 'metadata' || host === 'metadata.google.internal' || host === 'instance-data')
    return `names a metadata server (${host}), not a registry`;
  return undefined;
}

function matches(pattern: string, name: string): boolean {
  return pattern.endsWith('*') ? name.startsWith(pattern.slice(0, -1)) : name === pattern;
}

/** Why `team` may not run `image` (as root, when `asRoot`) under `policy`, or undefined. */
export function imageProblem(image: string, team: string, policy: ImagePolicy = {}, asRoot = false): string | undefined {
  if (asRoot && !policy.rootTeams?.includes(team))
    return `container.runAsRoot: team ${team} may not run a container as root (the fleet config's images.rootTeams ${
      policy.rootTeams?.length ? `names ${policy.rootTeams.join(', ')}` : 'names no team'
    }); leave it out, and an image whose user is root runs as uid 65534`;
  const { registry, repository } = imageName(image);
  const host = registryHostProblem(registry);
  if (host) return `image ${host}`;
  if (policy.registries && !policy.registries.some((r) => r.toLowerCase() === registry))
    return `image: registry ${registry} is not one this fleet allows; allowed: ${policy.registries.join(', ')}`;
  const full = `${registry}/${repository}`;
  const rule = policy.teamRepositories?.find((r) => matches(r.repositories, full));
  if (rule && !rule.teams.includes(team))
    return `image: ${full} is a repository of team${rule.teams.length === 1 ? '' : 's'} ${rule.teams.join(', ')}; team ${team} may not run it`;
  return undefined;
}

const REGISTRY_RE = /^[a-z0-9][a-z0-9.-]*(:\d{1,5})?$/;
const REPOSITORY_PATTERN_RE = /^[a-z0-9][a-z0-9.-]*(:\d{1,5})?\/[a-z0-9._/-]*\*?$/;

/** The image rules as the fleet config and the functions' environment give them. */
export const ImagePolicySchema = z.strictObject({
  registries: z.optional(
    z
      .array(
        z.string().check(
          z.regex(REGISTRY_RE, { error: 'a registry is host[:port] in lower case, e.g. "nvcr.io" or "docker.io"' }),
          z.refine((r) => registryHostProblem(r) === undefined, {
            error: 'a registry is named by its DNS name, never an address or the machine itself',
          }),
        ),
      )
      .check(z.minLength(1), z.maxLength(100)),
  ),
  teamRepositories: z.optional(
    z
      .array(
        z.strictObject({
          repositories: z.string().check(
            z.regex(REPOSITORY_PATTERN_RE, {
              error: 'repositories are registry/path, with a trailing "*" for a prefix, e.g. "nvcr.io/nlp/*"',
            }),
          ),
          teams: z
            .array(
              z
                .string()
                .check(z.refine(isValidTeamId, { error: 'a team id is lower-case letters, digits and "-", at most 32 characters' })),
            )
            .check(z.minLength(1), z.maxLength(100)),
        }),
      )
      .check(z.maxLength(200)),
  ),
  rootTeams: z.optional(
    z
      .array(z.string().check(z.refine(isValidTeamId, { error: 'a team id is lower-case letters, digits and "-", at most 32 characters' })))
      .check(z.maxLength(100)),
  ),
});
