import type { FleetFlags } from '../fleet.ts';
import { print, withFleet, type Io } from './shared.ts';

export async function cancelCommand(jobId: string, flags: FleetFlags & { json?: boolean }, io: Io): Promise<void> {
  const out = await withFleet(flags, io, (fleet) => fleet.cancel(jobId));
  print(io, flags.json, { jobId, ...out }, () => out.message);
}
