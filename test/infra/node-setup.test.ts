import { execFile, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { sudoRemover } from '../../agent/cli.ts';
import {
  agentSudoers,
  agentUnit,
  LEASE_FILE,
  watchdogUnits,
  agentUserData,
  cleanJobDirScript,
  gceStartupScript,
  CLEAN_JOB_DIR_HELPER,
  jobFoldersMountScript,
  metadataWallScript,
  NVIDIA_SMI,
  JOB_DISK_HELPER,
  jobDiskScript,
  dataVolumeScript,
  DATA_VOLUME_DIR,
  DATA_VOLUME_ENV,
  DATA_VOLUME_HELPER,
  PEERS_HELPER,
  peersHelperScript,
  portWallScript,
  wallUnit,
  WALL_SCRIPT,
} from '../../infra/node-setup.ts';
import { agentWorld, COUNTER_JOB, waitFor } from '../support/agent-world.ts';

const run = promisify(execFile);

/** A jobs folder, a folder outside it, and the helper (for that jobs folder) as a real script. */
function machine() {
  const top = mkdtempSync(join(tmpdir(), 'node-setup-'));
  const jobs = join(top, 'var-lib-gpu-fleet', 'jobs');
  const outside = join(top, 'etc');
  mkdirSync(jobs, { recursive: true });
  mkdirSync(outside);
  writeFileSync(join(outside, 'passwd'), 'root:x:0:0');
  const helper = join(top, 'gpu-fleet-clean-job-dir');
  writeFileSync(helper, cleanJobDirScript(jobs));
  chmodSync(helper, 0o755);
  const clean = (path: string) =>
    run('bash', [helper, path]).then(
      () => ({ code: 0, stderr: '' }),
      (e: { code: number; stderr: string }) => ({ code: e.code, stderr: e.stderr }),
    );
  return { top, jobs, outside, helper, clean };
}

describe('the job-folder helper the agent runs as root (through sudo)', () => {
  it('removes a job folder under the jobs folder, and a folder already gone is fine', async () => {
    const m = machine();
    const folder = join(m.jobs, 'nlp.j1', 'attempt-1', 'checkpoint');
    mkdirSync(join(folder, 'step-1'), { recursive: true });
    writeFileSync(join(folder, 'step-1', 'weights.pt'), 'x');
    expect(await m.clean(folder)).toEqual({ code: 0, stderr: '' });
    expect(existsSync(folder)).toBe(false);
    expect(await m.clean(folder)).toEqual({ code: 0, stderr: '' });
  });

  it('refuses anything that is not under the jobs folder once links and ".." are resolved', async () => {
    const m = machine();
    mkdirSync(join(m.jobs, 'nlp.j1'));
    const link = join(m.jobs, 'nlp.j1', 'checkpoint');
    symlinkSync(m.outside, link); // a job swapped its folder for a link to the host
    for (const path of [m.outside, `${m.jobs}/nlp.j1/../../../etc`, m.jobs, `${m.jobs}/`, link]) {
      const out = await m.clean(path);
      expect(out.code, path).toBe(2);
      expect(out.stderr, path).toMatch(/refused/);
    }
    expect(existsSync(join(m.outside, 'passwd'))).toBe(true);
    expect((await m.clean('')).code).toBe(2);
  });

  it('is what the agent runs to remove a finished attempt’s folders (sudo, then the helper)', async () => {
    const m = machine();
    // sudo as a test stand-in: records what it was asked to run, then runs it.
    const sudo = join(m.top, 'sudo');
    const asked = join(m.top, 'sudo.log');
    writeFileSync(sudo, `#!/bin/bash\necho "$*" >> ${asked}\n[ "$1" = "-n" ] && shift\nexec bash "$@"\n`);
    chmodSync(sudo, 0o755);
    const w = agentWorld();
    try {
      const workDir = join(m.jobs, '..');
      const a = w.agent('i-a', { workDir, removeFolder: sudoRemover(m.helper, process.env, sudo) });
      await a.heartbeat();
      await w.submit('nlp.j1', { command: ['node', COUNTER_JOB, '10', '10', '5'] });
      await w.place('nlp.j1', ['i-a']);
      await a.heartbeat();
      await waitFor('the job to succeed', async () => (await w.jobs.get('nlp.j1'))!.state === 'succeeded');
      const checkpointDir = join(m.jobs, 'nlp.j1', 'attempt-1', 'checkpoint');
      await waitFor('the checkpoint folder to be removed', () => !existsSync(checkpointDir));
      await a.settled();
      const { readFileSync } = await import('node:fs');
      expect(readFileSync(asked, 'utf8')).toContain(`-n ${m.helper} ${checkpointDir}`);
      expect(existsSync(join(m.jobs, 'nlp.j1', 'attempt-1', 'output.log'))).toBe(true); // the log stays
    } finally {
      await w.shutdown();
    }
  });
});

describe('the agent’s service and sudo rules', () => {
  it('runs the agent as its own user with the docker group, and lets it run as root only MIG changes and the helper', () => {
    const unit = agentUnit('/usr/bin/node');
    expect(unit).toMatch(/^User=gpu-fleet$/m);
    expect(unit).toMatch(/^SupplementaryGroups=docker$/m);
    // No capability over file modes: it reads jobs' files through their folder's group (a real engine shows it can:
    // test/agent/docker-engine.test.ts "lets the agent read what every launch kind writes… without any capability").
    expect(unit).not.toMatch(/Capabilit/m);
    expect(unit).toMatch(
      /^ExecStart=\/usr\/bin\/node .* --sudo-helper \/usr\/local\/sbin\/gpu-fleet-clean-job-dir --peers-helper \/usr\/local\/sbin\/gpu-fleet-peers --disk-helper \/usr\/local\/sbin\/gpu-fleet-job-disk$/m,
    );
    const rules = agentSudoers()
      .split('\n')
      .filter((l) => l && !l.startsWith('#') && !l.startsWith('Defaults'));
    expect(rules).toEqual([
      `gpu-fleet ALL=(root) NOPASSWD: ${NVIDIA_SMI} mig *, ${CLEAN_JOB_DIR_HELPER} /var/lib/gpu-fleet/jobs/*, ${PEERS_HELPER} *, ${JOB_DISK_HELPER} *`,
    ]);
  });
});

describe('the metadata wall at boot', () => {
  const userData = agentUserData({
    assetUrl: 's3://assets/agent.mjs',
    region: 'us-east-1',
    agentApiUrl: 'https://api.example/',
    bucket: 'ckpt',
    noticeMarginSec: 20,
    migEnabled: false,
    prometheusPort: 9400,
  });

  it('walls IMDS (IPv4 and IPv6) and GCE metadata for every uid but root and the agent, and for every bridge container', () => {
    const script = metadataWallScript();
    expect(script).toContain(`$ipt -w -A GPU-FLEET-META -m owner --uid-owner "0" -j RETURN`);
    expect(script).toContain(`$ipt -w -A GPU-FLEET-META -m owner --uid-owner "$(id -u gpu-fleet)" -j RETURN`);
    expect(script).toContain("wall iptables '169.254.169.254'");
    expect(script).toMatch(/then wall ip6tables 'fd00:ec2::254'; host_wall ip6tables; fi/);
    expect(script).toContain('-I DOCKER-USER 1 -d "$a" -j REJECT');
    // The jobs' bridge reaches no listener of the host (proven on a real engine: "keeps a bridge job from the host's listeners…").
    expect(script).toContain(`$ipt -w -I INPUT 1 -i 'gpufleet0' -j GPU-FLEET-JOBS-IN`);
    // The script itself is what the container test installs (test/agent/docker-engine.test.ts "the metadata wall…").
    const parsed = spawnSync('bash', ['-n'], { input: script });
    expect(parsed.status, parsed.stderr.toString()).toBe(0);
  });

  it('mounts the job folders nosuid,nodev at every boot, caps every job under one slice, and sets the engine’s defaults before the agent starts', () => {
    const at = (needle: string) => userData.findIndex((l) => l.includes(needle));
    expect(userData).toContain(
      "grep -qs ' /var/lib/gpu-fleet/jobs ' /etc/fstab || echo '/var/lib/gpu-fleet/jobs /var/lib/gpu-fleet/jobs none bind,nosuid,nodev 0 0' >> /etc/fstab",
    );
    expect(jobFoldersMountScript()).toContain('mount -o remount,bind,nosuid,nodev "$d"');
    expect(at('agent jobs-slice')).toBeGreaterThan(at('gpu-fleet-agent.mjs'));
    expect(userData[at('agent jobs-slice')]).toMatch(/> \/etc\/systemd\/system\/gpu-fleet-jobs\.slice$/);
    expect(at('systemctl restart docker')).toBeLessThan(at('systemctl enable --now gpu-fleet-agent.service'));
    expect(userData[at('/etc/docker/daemon.json')]).toContain('"no-new-privileges":true,"icc":false');
    // The agent outlives a job in the kernel's choice of whom to kill for memory.
    expect(agentUnit('/usr/bin/node')).toMatch(/^OOMScoreAdjust=-900$/m);
    for (const script of [jobFoldersMountScript(), dataVolumeScript()]) expect(spawnSync('bash', ['-n'], { input: script }).status).toBe(0);
    // Docker's data moves to the data volume before the engine starts again, where the machine has one; the agent learns
    // from the volume's script whether the engine can hold a container's own files to a size.
    expect(at(DATA_VOLUME_HELPER)).toBeGreaterThan(-1);
    expect(at(DATA_VOLUME_HELPER)).toBeLessThan(at('/etc/docker/daemon.json'));
    expect(userData[at('/etc/docker/daemon.json')]).toContain(
      `DATA_ROOT=$(mountpoint -q ${DATA_VOLUME_DIR} && echo ${DATA_VOLUME_DIR}/docker || true)`,
    );
    expect(userData[at('/etc/docker/daemon.json')]).toContain('"data-root":process.env.DATA_ROOT');
    expect(agentUnit('/usr/bin/node')).toMatch(new RegExp(`^EnvironmentFile=-${DATA_VOLUME_ENV}$`, 'm'));
  });

  it("installs the port wall with the metadata wall, and the peers helper the agent opens each gang's machines with", () => {
    const at = (needle: string) => userData.findIndex((l) => l.includes(needle));
    const ports = userData[at(`cat > ${WALL_SCRIPT}-ports`)]!;
    expect(ports).toContain('-p tcp -m multiport --dports 9400 -j RETURN');
    expect(ports).toContain('$ipt -w -C INPUT -j GPU-FLEET-IN 2>/dev/null || $ipt -w -A INPUT -j GPU-FLEET-IN');
    // The metadata wall's script runs the ports' too: one unit installs both, at boot and after each docker restart.
    expect(userData[at(`cat > ${WALL_SCRIPT} <<`)]).toMatch(new RegExp(`${WALL_SCRIPT}-ports\\nEOF$`));
    expect(at(`cat > ${PEERS_HELPER}`)).toBeLessThan(at('systemctl enable --now gpu-fleet-agent.service'));
    expect(agentUnit('/usr/bin/node')).toContain(`--peers-helper ${PEERS_HELPER}`);
    for (const script of [peersHelperScript(), portWallScript({ openPorts: [9400, 8000] })]) {
      const parsed = spawnSync('bash', ['-n'], { input: script });
      expect(parsed.status, parsed.stderr.toString()).toBe(0);
    }
    // Refused before iptables is ever run: what is not a key, an address or a port.
    const helper = join(mkdtempSync(join(tmpdir(), 'peers-')), 'gpu-fleet-peers');
    writeFileSync(helper, peersHelperScript(), { mode: 0o755 });
    const run = (...args: string[]) => spawnSync('bash', [helper, ...args], { encoding: 'utf8' });
    expect(run('open', 'ABC', '10.0.0.1')).toMatchObject({
      status: 2,
      stderr: expect.stringContaining('the key must be 1 to 16 hex digits') as string,
    });
    expect(run('open', 'abc', '$(reboot)')).toMatchObject({ status: 2, stderr: expect.stringContaining('is not an address') as string });
    expect(run('open-port', 'abc', '70000')).toMatchObject({ status: 2, stderr: expect.stringContaining('usage:') as string });
    expect(run('flush')).toMatchObject({ status: 2 });
  });

  it('gives a GCP machine the same walls at every start, from a startup script the product ships', () => {
    const gce = gceStartupScript({ prometheusPort: 9400, openPorts: [8000] });
    const parsed = spawnSync('bash', ['-n'], { input: gce });
    expect(parsed.status, parsed.stderr.toString()).toBe(0);
    // The same pieces an AWS machine's boot installs, each byte for byte.
    for (const piece of [
      metadataWallScript(),
      portWallScript({ openPorts: [9400, 8000] }),
      peersHelperScript(),
      jobDiskScript(),
      jobFoldersMountScript(),
      wallUnit(),
      agentSudoers(),
    ])
      expect(gce).toContain(piece);
    expect(gce).toContain('"no-new-privileges":true,"icc":false');
    const lines = gce.split('\n');
    const at = (needle: string) => lines.findIndex((l) => l.includes(needle));
    expect(at('systemctl restart docker')).toBeLessThan(at('systemctl restart gpu-fleet-wall.service'));
    expect(lines.at(-2)).toBe('systemctl restart gpu-fleet-wall.service');
  });

  it("installs a GCP machine's agent with its identity token as its only credential: no AWS key on the disk", () => {
    const agent = {
      bundleUrl: 'gs://ml-prod-gpu-fleet/agent/gpu-fleet-agent.mjs',
      apiUrl: 'https://abc123.lambda-url.us-west-2.on.aws/',
      audience: 'gpu-fleet/GpuFleet/agent-api',
      region: 'us-west-2',
      checkpointBucket: 'gpu-fleet-checkpoints-123',
      checkpointStore: 'gs://ml-prod-gpu-fleet-us-central1/checkpoints/',
    };
    const gce = gceStartupScript({ prometheusPort: 9400, agent });
    const parsed = spawnSync('bash', ['-n'], { input: gce });
    expect(parsed.status, parsed.stderr.toString()).toBe(0);
    const lines = gce.split('\n');
    const at = (needle: string) => lines.findIndex((l) => l.includes(needle));
    expect(at('gcloud storage cp gs://ml-prod-gpu-fleet/agent/gpu-fleet-agent.mjs /opt/gpu-fleet/gpu-fleet-agent.mjs')).toBeGreaterThan(-1);
    // The agent's settings: the unsigned URL and the audience its token is asked for; never a key.
    expect(gce).toContain(`GPU_FLEET_AGENT_API_URL=${agent.apiUrl}\nGPU_FLEET_AGENT_API_AUDIENCE=${agent.audience}`);
    expect(gce).not.toMatch(/AWS_ACCESS_KEY_ID|AWS_SECRET_ACCESS_KEY|AWS_SESSION_TOKEN/);
    expect(gce).toContain(agentUnit('${NODE_BIN}', ` --checkpoint-store ${agent.checkpointStore}`));
    // The walls first, at every start; then the agent, which requires them.
    expect(at('systemctl restart gpu-fleet-wall.service')).toBeLessThan(at('systemctl restart gpu-fleet-agent.service'));
    expect(lines.at(-2)).toBe('systemctl restart gpu-fleet-watchdog.timer');
    // The watchdog on GCP too, started with the agent.
    expect(gce).toContain(watchdogUnits('${NODE_BIN}').service);
    expect(at('systemctl restart gpu-fleet-agent.service')).toBeLessThan(at('systemctl restart gpu-fleet-watchdog.timer'));
  });

  it("runs the machine's watchdog as root every 15 s from boot, outside the agent, on the agent's lease file", () => {
    const { service, timer } = watchdogUnits('/usr/bin/node');
    // Root: no User= (it stops containers whatever became of the agent's user and its sudo rules).
    expect(service).not.toMatch(/^User=/m);
    expect(service).toMatch(
      /^ExecStart=\/usr\/bin\/node \/opt\/gpu-fleet\/gpu-fleet-agent\.mjs agent watchdog --lease-file \/var\/lib\/gpu-fleet\/lease\.json --stop-grace-sec 30$/m,
    );
    expect(service).toMatch(/^Type=oneshot$/m);
    expect(timer).toMatch(/^OnUnitActiveSec=15$/m);
    expect(timer).toMatch(/^OnBootSec=60$/m);
    const at = (needle: string) => userData.findIndex((l) => l.includes(needle));
    expect(at('cat > /etc/systemd/system/gpu-fleet-watchdog.timer')).toBeGreaterThan(-1);
    expect(at('systemctl enable --now gpu-fleet-agent.service')).toBeLessThan(at('systemctl enable --now gpu-fleet-watchdog.timer'));
    // The file it reads is the one the agent writes: its work folder's lease.json (agent/cli.ts).
    expect(LEASE_FILE).toBe('/var/lib/gpu-fleet/lease.json');
  });

  it('installs the wall before the agent starts, and again whenever docker restarts; the agent does not start without it', () => {
    const at = (needle: string) => userData.findIndex((l) => l.includes(needle));
    expect(at(`cat > ${WALL_SCRIPT}`)).toBeGreaterThan(-1);
    expect(at('systemctl enable --now gpu-fleet-wall.service')).toBeLessThan(at('systemctl enable --now gpu-fleet-agent.service'));
    expect(wallUnit()).toMatch(/^PartOf=docker\.service$/m);
    expect(wallUnit()).toMatch(/^Before=gpu-fleet-agent\.service$/m);
    expect(wallUnit()).toMatch(/^WantedBy=docker\.service multi-user\.target$/m);
    expect(agentUnit('/usr/bin/node')).toMatch(/^Requires=gpu-fleet-wall\.service$/m);
  });
});
