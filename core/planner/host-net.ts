import { containerSettings } from '../job-spec.ts';
import type { Job, NodeAssignment } from '../job.ts';

/** What a node holds of the host's network: the ports taken there, the teams whose work runs on it (a node's capacity has both). */
export interface NodePorts {
  readonly ports: readonly number[];
}
export interface NodeHostNet {
  readonly hostNetTeams: readonly string[];
}

/** The first rendezvous port a gang leader's machine gives (torch.distributed's default MASTER_PORT), and how many follow it. */
export const RENDEZVOUS_PORT_BASE = 29_500;
export const RENDEZVOUS_PORTS = 500;

/**
 * The wall between teams' host-network work: a job on the machine's own network, of `team`, goes
 * only where every other host-network job is its own team's or of a team in `sharesWith` (the
 * pairs the fleet config allows).
 */
export interface HostNetWall {
  readonly team: string;
  readonly sharesWith: ReadonlySet<string>;
}

/** The wall of a job of `team` on the host's network, from the policy's pairs. */
export function hostNetWall(team: string, pairs: readonly (readonly [string, string])[] = []): HostNetWall {
  const sharesWith = new Set<string>();
  for (const [a, b] of pairs) {
    if (a === team) sharesWith.add(b);
    if (b === team) sharesWith.add(a);
  }
  return { team, sharesWith };
}

/** The team whose side of the wall a job is on: its own when it runs on the host's network (a service, a gang), else none. */
export function hostNetTeamOf(job: Pick<Job, 'team' | 'spec'>): string | undefined {
  return containerSettings(job.spec).network === 'host' ? job.team : undefined;
}

/** Whether a job behind `wall` (none: it is not on the host's network) may share the node with its host-network work. */
export function wallAllows(node: NodeHostNet, wall: HostNetWall | undefined): boolean {
  if (!wall) return true;
  for (const t of node.hostNetTeams) if (t !== wall.team && !wall.sharesWith.has(t)) return false;
  return true;
}

/** Whether none of `ports` is taken on the node. */
export function portsFree(node: NodePorts, ports: readonly number[]): boolean {
  for (const p of ports) if (node.ports.includes(p)) return false;
  return true;
}

/**
 * A gang's fits with a rendezvous port on its first machine (the leader's), the first free one of
 * the range there, so two gangs led from one machine never meet at the same port; a single
 * machine's fit is returned as it is. The port is taken with the fit ({@link commitFit}).
 */
export function withRendezvousPort<F extends { readonly node: NodePorts; readonly assignment: NodeAssignment }>(fits: readonly F[]): F[] {
  const leader = fits[0];
  if (fits.length < 2 || !leader) return [...fits];
  // 500 ports for the gangs led from one machine of at most 16 GPUs (and its services' ports): one is always free.
  const port = freeRendezvousPort(leader.node) ?? RENDEZVOUS_PORT_BASE;
  return [{ ...leader, assignment: { ...leader.assignment, ports: [...(leader.assignment.ports ?? []), port] } }, ...fits.slice(1)];
}

/**
 * The rendezvous port a gang led from this machine gets: the first of the range its machine does
 * not hold (a service's port included); undefined when all are held.
 */
export function freeRendezvousPort(node: NodePorts): number | undefined {
  for (let p = RENDEZVOUS_PORT_BASE; p < RENDEZVOUS_PORT_BASE + RENDEZVOUS_PORTS; p++) if (!node.ports.includes(p)) return p;
  return undefined;
}
