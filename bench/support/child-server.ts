import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * Runs a local server in a child Node.js process (its memory and CPU are not the measuring
 * process's): `script` starts it and prints its port and a newline once it listens. `nodeArgs` go
 * before the script (an OpenSSL provider, say). Resolves the port and how to stop it.
 */
export async function listenInChild(script: string, nodeArgs: readonly string[] = []): Promise<{ port: number; stop(): Promise<void> }> {
  const child = spawn(process.execPath, [...nodeArgs, '-e', script], {
    cwd: fileURLToPath(new URL('../..', import.meta.url)),
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += String(d);
      if (out.includes('\n')) resolve(Number(out.trim()));
    });
    child.once('exit', (code) => reject(new Error(`the server exited with code ${String(code)} before it listened`)));
  });
  return {
    port,
    async stop() {
      child.kill();
      await new Promise<void>((resolve) => (child.exitCode !== null ? resolve() : child.once('exit', () => resolve())));
    },
  };
}

/**
 * Runs a bench script again in a child Node.js process (with the loader this one was started
 * with, and `nodeArgs`), `args` and `--json` on its command line, and parses the JSON rows it
 * prints: each run's memory is its own. Throws with the script's name when the child fails.
 */
export async function rowsFromChild<R>(scriptUrl: string, args: readonly string[], nodeArgs: readonly string[] = []): Promise<R[]> {
  const script = fileURLToPath(scriptUrl);
  const child = spawn(process.execPath, [...process.execArgv, ...nodeArgs, script, ...args, '--json'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += String(d)));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  if (code !== 0) throw new Error(`${script} ${args.join(' ')} exited with code ${String(code)}`);
  return JSON.parse(out) as R[];
}
