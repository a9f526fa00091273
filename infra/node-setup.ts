/**
 * How a GPU machine is set up at boot: Node.js from the distribution, the agent bundle from the
 * stack's asset bucket, a user of its own for the agent, its settings in an environment file, and
 * a systemd service that restarts it.
 *
 * The agent runs as `gpu-fleet`, not root. What that user may do:
 * - run `docker` (it is in the docker group: it starts and stops the jobs' containers). The docker
 *   group is root-equivalent (a member can start a privileged container), so this protects against
 *   the agent's own mistakes with files and paths, not against someone who controls the agent;
 * - read any file (CAP_DAC_READ_SEARCH), so that it can upload checkpoint files a container wrote
 *   as root with a private mode; it cannot write files that are not its own;
 * - through sudo, exactly two commands as root: `nvidia-smi mig …` (MIG instances are created and
 *   destroyed per job) and the helper below that removes one job folder under the jobs folder;
 * - write under /var/lib/gpu-fleet only (the service's file system is read-only elsewhere).
 */

import { JOBS_CGROUP, JOBS_NETWORK } from '../core/container-limits.ts';

export const AGENT_USER = 'gpu-fleet';
export const AGENT_HOME = '/var/lib/gpu-fleet';
export const JOBS_DIR = `${AGENT_HOME}/jobs`;
export const CLEAN_JOB_DIR_HELPER = '/usr/local/sbin/gpu-fleet-clean-job-dir';
export const NVIDIA_SMI = '/usr/bin/nvidia-smi';

/**
 * The root-owned helper the agent runs through sudo to remove a job folder it cannot remove
 * itself (files a container wrote as root): the folder must be under `jobsDir` once links are
 * resolved; a folder already gone is fine (removal is idempotent); anything else is refused.
 */
export function cleanJobDirScript(jobsDir: string = JOBS_DIR): string {
  return `#!/bin/bash
# gpu-fleet: removes one job folder under ${jobsDir} (the node agent's jobs), nothing else.
set -euo pipefail
root=${jobsDir}
if [ "$#" -ne 1 ] || [ -z "$1" ]; then echo "usage: $0 <a folder under $root>" >&2; exit 2; fi
if [ ! -e "$1" ] && [ ! -L "$1" ]; then exit 0; fi
if [ -L "$1" ]; then echo "refused: $1 is a link" >&2; exit 2; fi
target=$(realpath -e -- "$1")
case "$target" in
  "$root"/?*) ;;
  *) echo "refused: $1 is not under $root" >&2; exit 2 ;;
esac
rm -rf --one-file-system -- "$target"
`;
}

/**
 * The root-run commands that make the jobs folder a mount of its own with `nosuid,nodev`: what a
 * container writes into its folder (a setuid-root binary, a device node) is inert on the host and in
 * every other container that mounts it. A job's folder is bind-mounted into its container from here,
 * and a bind mount keeps these flags. Idempotent.
 */
export function jobFoldersMountScript(dir: string = JOBS_DIR): string {
  return `#!/bin/bash
# gpu-fleet: ${dir} holds what jobs write; nothing there runs setuid or opens a device.
set -euo pipefail
d=${dir}
mkdir -p "$d"
mountpoint -q "$d" || mount --bind "$d" "$d"
mount -o remount,bind,nosuid,nodev "$d"
`;
}

/**
 * The docker engine settings every job container gets, whatever the agent passes: no privilege
 * gain, no traffic between containers on docker's default bridge, and bounded json logs (the agent
 * reads a job's output from its own file). Merged into the machine's /etc/docker/daemon.json
 * (a GPU image's `runtimes` stay).
 */
export const DOCKER_DAEMON_SETTINGS = {
  'no-new-privileges': true,
  icc: false,
  'log-driver': 'json-file',
  'log-opts': { 'max-size': '50m', 'max-file': '2' },
} as const;

/**
 * The systemd slice every job's container runs under (`--cgroup-parent`): the cap on all jobs
 * together, from `gpu-fleet agent jobs-slice` (what the machine has less the reserve the agent,
 * dockerd and the system keep: core/container-limits.ts).
 */
export const JOBS_SLICE_FILE = `/etc/systemd/system/${JOBS_CGROUP.slice}`;

/** What the agent's user may run as root: MIG changes and the folder helper, nothing else. */
export function agentSudoers(): string {
  return `# gpu-fleet node agent: MIG instances per job, and removal of its job folders.
Defaults:${AGENT_USER} !requiretty
${AGENT_USER} ALL=(root) NOPASSWD: ${NVIDIA_SMI} mig *, ${CLEAN_JOB_DIR_HELPER} ${JOBS_DIR}/*
`;
}

/**
 * The metadata servers no job's container may reach: AWS's instance metadata service (IPv4 and
 * its IPv6 address on Nitro) and GCE's metadata server (the same IPv4 address). Whoever reaches
 * one holds the machine's role or service account.
 */
export const METADATA_ADDRESSES: { readonly v4: readonly string[]; readonly v6: readonly string[] } = {
  v4: ['169.254.169.254'],
  v6: ['fd00:ec2::254'],
};

export const WALL_CHAIN = 'GPU-FLEET-META';
/** The chain that refuses what the jobs' bridge sends to the host itself. */
export const BRIDGE_WALL_CHAIN = 'GPU-FLEET-JOBS-IN';
export const WALL_SCRIPT = '/usr/local/sbin/gpu-fleet-wall';

/**
 * The root-run script that walls the metadata servers off from jobs' containers, in both network
 * modes; idempotent (a rule already there is not added again), so it runs at boot before the agent
 * and again whenever docker restarts.
 * - Bridge containers: docker forwards their packets, and `DOCKER-USER` (the chain docker leaves to
 *   its users, kept across restarts) rejects those to a metadata address, whoever sent them.
 * - Host-network containers share the host's stack: their packets leave through `OUTPUT`, where
 *   only root and the agent's user (`allowUids`, each a number or a shell expression such as
 *   `$(id -u gpu-fleet)`) may send to a metadata address. Such containers run as
 *   `HOST_NETWORK_JOB_UID` (core/job-spec.ts) with no capabilities and no privilege gain
 *   (agent/runner.ts), so they cannot become either.
 */
export function metadataWallScript(
  o: {
    readonly allowUids?: readonly string[];
    readonly v4?: readonly string[];
    readonly v6?: readonly string[];
    /** The jobs' bridge interface (core/container-limits.ts `JOBS_NETWORK`): nothing it sends reaches the host. */
    readonly jobsBridge?: string;
  } = {},
): string {
  const allow = o.allowUids ?? ['0', `$(id -u ${AGENT_USER})`];
  const bridge = o.jobsBridge ?? JOBS_NETWORK.bridge;
  const v4 = o.v4 ?? METADATA_ADDRESSES.v4;
  const v6 = o.v6 ?? METADATA_ADDRESSES.v6;
  const quoted = (list: readonly string[]) => list.map((a) => `'${a}'`).join(' ');
  return `#!/bin/bash
# gpu-fleet: no job container reaches a metadata server (the machine's credentials).
set -euo pipefail
wall() {
  local ipt=$1; shift
  # OUTPUT (the host's own packets, host-network containers' included): only the allowed uids pass. The chain is
  # filled once, when it is made (never flushed while OUTPUT jumps to it: an empty chain lets everything through).
  if $ipt -w -N ${WALL_CHAIN} 2>/dev/null; then
${allow.map((u) => `    $ipt -w -A ${WALL_CHAIN} -m owner --uid-owner "${u}" -j RETURN`).join('\n')}
    $ipt -w -A ${WALL_CHAIN} -j REJECT
  fi
  for a in "$@"; do
    $ipt -w -C OUTPUT -d "$a" -j ${WALL_CHAIN} 2>/dev/null || $ipt -w -I OUTPUT 1 -d "$a" -j ${WALL_CHAIN}
    # Forwarded from docker's networks (bridge containers): none passes.
    $ipt -w -N DOCKER-USER 2>/dev/null || true
    $ipt -w -C DOCKER-USER -d "$a" -j REJECT 2>/dev/null || $ipt -w -I DOCKER-USER 1 -d "$a" -j REJECT
  done
}
# The jobs' bridge: a container on it reaches no listener of the host (a gang's rendezvous port on the host's
# network, the agent's /metrics, sshd), at any of the host's addresses. What it sends elsewhere is forwarded.
host_wall() {
  local ipt=$1
  if $ipt -w -N ${BRIDGE_WALL_CHAIN} 2>/dev/null; then
    $ipt -w -A ${BRIDGE_WALL_CHAIN} -j REJECT
  fi
  $ipt -w -C INPUT -i '${bridge}' -j ${BRIDGE_WALL_CHAIN} 2>/dev/null || $ipt -w -I INPUT 1 -i '${bridge}' -j ${BRIDGE_WALL_CHAIN}
}
wall iptables ${quoted(v4)}
host_wall iptables
${v6.length > 0 ? `if command -v ip6tables >/dev/null && ip6tables -w -L OUTPUT >/dev/null 2>&1; then wall ip6tables ${quoted(v6)}; host_wall ip6tables; fi\n` : ''}`;
}

/**
 * The wall's systemd unit: run once at boot after docker (which makes its chains) and before the
 * agent, and again each time docker restarts (PartOf: a restart of docker restarts it).
 */
export function wallUnit(): string {
  return `[Unit]
Description=gpu-fleet: wall the metadata servers off from job containers
After=docker.service
PartOf=docker.service
Before=gpu-fleet-agent.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=${WALL_SCRIPT}

[Install]
WantedBy=docker.service multi-user.target
`;
}

/** The agent's systemd unit (`nodeBin` is the shell variable or path of Node.js). */
export function agentUnit(nodeBin: string): string {
  return `[Unit]
Description=gpu-fleet node agent
After=network-online.target docker.service gpu-fleet-wall.service
Wants=network-online.target docker.service
Requires=gpu-fleet-wall.service

[Service]
User=${AGENT_USER}
Group=${AGENT_USER}
SupplementaryGroups=docker
AmbientCapabilities=CAP_DAC_READ_SEARCH
# The kernel's OOM killer takes a job before the agent (jobs are capped below the machine: gpu-fleet-jobs.slice).
OOMScoreAdjust=-900
Environment=HOME=${AGENT_HOME}
EnvironmentFile=/etc/gpu-fleet/agent.env
ExecStart=${nodeBin} /opt/gpu-fleet/gpu-fleet-agent.mjs agent run --runner docker --nvidia-smi ${NVIDIA_SMI} --sudo-helper ${CLEAN_JOB_DIR_HELPER}
ProtectSystem=full
ProtectHome=true
PrivateTmp=true
ReadWritePaths=${AGENT_HOME}
Restart=always
RestartSec=5
KillMode=mixed
TimeoutStopSec=60

[Install]
WantedBy=multi-user.target
`;
}

/** The node's boot script, as user-data commands. */
export function agentUserData(o: {
  assetUrl: string;
  region: string;
  agentApiUrl: string;
  bucket: string;
  noticeMarginSec: number;
  migEnabled: boolean;
  /** The group's launch hook (a group with a warm pool): the agent prepares a warm machine, then lets each launch go. */
  launchHook?: string;
  /** Serve /metrics for Prometheus on this port (the config's `prometheus.port`); off without it. */
  prometheusPort?: number;
  /** The node's own dcgm-exporter (the config's `dcgmExporterUrl`), read for MIG slices' utilisation. */
  dcgmExporterUrl?: string;
}): string[] {
  const envFile = [
    ...(o.prometheusPort !== undefined ? [`GPU_FLEET_PROMETHEUS_PORT=${o.prometheusPort}`] : []),
    ...(o.dcgmExporterUrl !== undefined ? [`GPU_FLEET_DCGM_EXPORTER_URL=${o.dcgmExporterUrl}`] : []),
    `AWS_REGION=${o.region}`,
    `GPU_FLEET_AGENT_API_URL=${o.agentApiUrl}`,
    `GPU_FLEET_CHECKPOINT_BUCKET=${o.bucket}`,
    `GPU_FLEET_NOTICE_MARGIN_SEC=${o.noticeMarginSec}`,
    `GPU_FLEET_AGENT_DIR=${AGENT_HOME}`,
    ...(o.launchHook !== undefined ? [`GPU_FLEET_LAUNCH_HOOK=${o.launchHook}`] : []),
  ];
  return [
    'set -euo pipefail',
    '(dnf install -y nodejs22 || dnf install -y nodejs20 || dnf install -y nodejs) >/var/log/gpu-fleet-node-install.log 2>&1',
    'NODE_BIN=$(command -v node-22 || command -v node22 || command -v node)',
    // The agent's own user: in the docker group, with its home as the work folder.
    'getent group docker >/dev/null || groupadd --system docker',
    `id -u ${AGENT_USER} >/dev/null 2>&1 || useradd --system --home-dir ${AGENT_HOME} --shell /usr/sbin/nologin --groups docker ${AGENT_USER}`,
    `mkdir -p /opt/gpu-fleet /etc/gpu-fleet ${JOBS_DIR}`,
    `chown -R ${AGENT_USER}:${AGENT_USER} ${AGENT_HOME} && chmod 0750 ${AGENT_HOME}`,
    // Job folders: nosuid,nodev, now and at every boot.
    `grep -qs ' ${JOBS_DIR} ' /etc/fstab || echo '${JOBS_DIR} ${JOBS_DIR} none bind,nosuid,nodev 0 0' >> /etc/fstab`,
    `bash <<'EOF'\n${jobFoldersMountScript()}EOF`,
    `aws s3 cp --region ${o.region} ${o.assetUrl} /opt/gpu-fleet/gpu-fleet-agent.mjs`,
    `cat > /etc/gpu-fleet/agent.env <<'EOF'\n${envFile.join('\n')}\nEOF`,
    `chown root:${AGENT_USER} /etc/gpu-fleet/agent.env && chmod 0640 /etc/gpu-fleet/agent.env`,
    `cat > ${CLEAN_JOB_DIR_HELPER} <<'EOF'\n${cleanJobDirScript()}EOF`,
    `chown root:root ${CLEAN_JOB_DIR_HELPER} && chmod 0755 ${CLEAN_JOB_DIR_HELPER}`,
    `cat > /etc/sudoers.d/gpu-fleet-agent <<'EOF'\n${agentSudoers()}EOF`,
    'chmod 0440 /etc/sudoers.d/gpu-fleet-agent && visudo -cf /etc/sudoers.d/gpu-fleet-agent',
    ...(o.migEnabled ? [`${NVIDIA_SMI} -mig 1 || true  # MIG mode on; instances are created per job by the agent`] : []),
    // The metadata wall, in place before the agent takes work and again after each docker restart.
    `cat > ${WALL_SCRIPT} <<'EOF'\n${metadataWallScript()}EOF`,
    `chown root:root ${WALL_SCRIPT} && chmod 0755 ${WALL_SCRIPT}`,
    `cat > /etc/systemd/system/gpu-fleet-wall.service <<'EOF'\n${wallUnit()}EOF`,
    `cat > /etc/systemd/system/gpu-fleet-agent.service <<EOF\n${agentUnit('${NODE_BIN}')}EOF`,
    // The engine's own defaults for every container, merged into what the image's daemon.json has (its runtimes stay).
    `"$NODE_BIN" -e 'const fs=require("fs"),f="/etc/docker/daemon.json";let c={};try{c=JSON.parse(fs.readFileSync(f,"utf8"))}catch{}fs.mkdirSync("/etc/docker",{recursive:true});fs.writeFileSync(f,JSON.stringify({...c,...${JSON.stringify(DOCKER_DAEMON_SETTINGS)}},null,2))'`,
    'systemctl restart docker',
    // Every job's container under one slice, capped together below what the machine has.
    `"$NODE_BIN" /opt/gpu-fleet/gpu-fleet-agent.mjs agent jobs-slice --nvidia-smi ${NVIDIA_SMI} > ${JOBS_SLICE_FILE}`,
    'systemctl daemon-reload',
    'systemctl enable --now gpu-fleet-wall.service',
    'systemctl enable --now gpu-fleet-agent.service',
  ];
}
