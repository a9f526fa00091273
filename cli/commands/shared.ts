import { isValidTeamId } from '../../core/budget.ts';
import { UsageError } from '../../core/errors.ts';
import { openFleet, type Fleet, type FleetFlags } from '../fleet.ts';
import { paragraph } from '../format.ts';

export interface Io {
  readonly stdout: NodeJS.WritableStream;
  readonly stderr: NodeJS.WritableStream;
}

/** Opens the fleet, runs the command, saves what changed. */
export async function withFleet<T>(flags: FleetFlags, io: Io, f: (fleet: Fleet) => Promise<T>): Promise<T> {
  const fleet = await openFleet(flags);
  // Said once, on stderr (a script's JSON on stdout stays as it is): what this role sees, and that the rest is out of view.
  if (fleet.viewer.kind === 'team')
    io.stderr.write(
      `gpu-fleet: as team ${fleet.viewer.team}'s role${fleet.role ? ` (${fleet.role})` : ''}: this shows team ${fleet.viewer.team}'s jobs, services, spend and output; other teams are out of view\n`,
    );
  try {
    return await f(fleet);
  } finally {
    await fleet.close();
  }
}

/** JSON for scripts, or the text for people with every line longer than the terminal's 120 columns wrapped. */
export const print = (io: Io, json: boolean | undefined, value: unknown, human: () => string) =>
  io.stdout.write(json ? `${JSON.stringify(value, null, 2)}\n` : `${paragraph(human())}\n`);

export function teamFlag(team: string | undefined, required = false): string | undefined {
  if (team === undefined) {
    if (required) throw new UsageError('--team is required: the team whose queue (and budget) the job goes to, e.g. --team nlp');
    return undefined;
  }
  if (!isValidTeamId(team))
    throw new UsageError(`--team "${team}" is not a team id: lower-case letters, digits and "-", at most 32 characters`);
  return team;
}
