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

/** What the agent's user may run as root: MIG changes and the folder helper, nothing else. */
export function agentSudoers(): string {
  return `# gpu-fleet node agent: MIG instances per job, and removal of its job folders.
Defaults:${AGENT_USER} !requiretty
${AGENT_USER} ALL=(root) NOPASSWD: ${NVIDIA_SMI} mig *, ${CLEAN_JOB_DIR_HELPER} ${JOBS_DIR}/*
`;
}

/** The agent's systemd unit (`nodeBin` is the shell variable or path of Node.js). */
export function agentUnit(nodeBin: string): string {
  return `[Unit]
Description=gpu-fleet node agent
After=network-online.target docker.service
Wants=network-online.target docker.service

[Service]
User=${AGENT_USER}
Group=${AGENT_USER}
SupplementaryGroups=docker
AmbientCapabilities=CAP_DAC_READ_SEARCH
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
    `aws s3 cp --region ${o.region} ${o.assetUrl} /opt/gpu-fleet/gpu-fleet-agent.mjs`,
    `cat > /etc/gpu-fleet/agent.env <<'EOF'\n${envFile.join('\n')}\nEOF`,
    `chown root:${AGENT_USER} /etc/gpu-fleet/agent.env && chmod 0640 /etc/gpu-fleet/agent.env`,
    `cat > ${CLEAN_JOB_DIR_HELPER} <<'EOF'\n${cleanJobDirScript()}EOF`,
    `chown root:root ${CLEAN_JOB_DIR_HELPER} && chmod 0755 ${CLEAN_JOB_DIR_HELPER}`,
    `cat > /etc/sudoers.d/gpu-fleet-agent <<'EOF'\n${agentSudoers()}EOF`,
    'chmod 0440 /etc/sudoers.d/gpu-fleet-agent && visudo -cf /etc/sudoers.d/gpu-fleet-agent',
    ...(o.migEnabled ? [`${NVIDIA_SMI} -mig 1 || true  # MIG mode on; instances are created per job by the agent`] : []),
    `cat > /etc/systemd/system/gpu-fleet-agent.service <<EOF\n${agentUnit('${NODE_BIN}')}EOF`,
    'systemctl daemon-reload',
    'systemctl enable --now gpu-fleet-agent.service',
  ];
}
