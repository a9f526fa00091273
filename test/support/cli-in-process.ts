import { Writable } from 'node:stream';
import { main } from '../../cli/main.ts';

/**
 * The CLI run in-process (cli/main.ts `main`, what bin/gpu-fleet.js runs), with the person's
 * environment for the one call: each command builds its AWS clients then, so they take these
 * credentials and endpoints. In-process, because each child process spends seconds starting
 * (tsx compiles the CLI again each time). Calls must not overlap: the environment is the process's.
 */
export async function cliInProcess(
  args: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const sink = (to: string[]) => new Writable({ write: (chunk, _enc, done) => (to.push(String(chunk)), done()) });
  const before = { ...process.env };
  const given = { ...env };
  for (const k of Object.keys(process.env)) if (!(k in given)) delete process.env[k];
  Object.assign(process.env, given);
  try {
    const code = await main(args, { stdout: sink(out), stderr: sink(err) });
    return { code, stdout: out.join(''), stderr: err.join('') };
  } finally {
    for (const k of Object.keys(process.env)) if (!(k in before)) delete process.env[k];
    Object.assign(process.env, before);
  }
}
