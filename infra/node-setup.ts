/**
 * How a GPU machine is set up at boot: Node.js from the distribution, the agent bundle from the
 * stack's asset bucket, a user of its own for the agent, its settings in an environment file, and
 * a systemd service that restarts it.
 *
 * The agent runs as `gpu-fleet`, not root. What that user may do:
 * - run `docker` (it is in the docker group: it starts and stops the jobs' containers). The docker
 *   group is root-equivalent (a member can start a privileged container), so this protects against
 *   the agent's own mistakes with files and paths, not against someone who controls the agent;
 * - read what a job writes through the job folder's group: the folder is the agent's, setgid and
 *   group-writable, and the container gets that group (it holds no capability that passes a file's
 *   mode, and neither does the agent). A file a job makes private to itself is one the agent cannot
 *   upload: that save fails, saying so, and nothing else is read;
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

/** The device name the launch template gives the data volume (a Nitro machine links it to its NVMe device). */
export const DATA_VOLUME_DEVICE = '/dev/sdf';
/** Where the data volume is mounted: Docker's data root and the job folders' disks live on it. */
export const DATA_VOLUME_DIR = '/var/lib/gpu-fleet-data';
/** What the data volume script tells the agent: whether the engine can hold each container's own files to a size. */
export const DATA_VOLUME_ENV = '/etc/gpu-fleet/data-volume.env';
export const DATA_VOLUME_HELPER = '/usr/local/sbin/gpu-fleet-data-volume';

/**
 * The machine's data volume, at every boot: XFS, mounted with project quotas on `dir`, holding
 * Docker's data root (images and every container's own files) and the job folders' disks (bound
 * onto `disksDir`), so nothing a job writes fills the root volume the agent, its state and the
 * system live on. Where the kernel mounts it with project quotas, the engine holds each
 * container's writable layer to a size (`--storage-opt size=`), and the script says so to the
 * agent (`GPU_FLEET_LAYER_QUOTA=1` in `envFile`); elsewhere the agent stops a container that writes
 * past its share (core/container-limits.ts `writableLayerMiB`). Without the device, nothing changes.
 * Idempotent: a volume with a file system is never formatted again.
 */
export function dataVolumeScript(
  o: {
    readonly device?: string;
    readonly dir?: string;
    readonly disksDir?: string;
    readonly envFile?: string;
    readonly fstab?: string;
  } = {},
): string {
  const dir = o.dir ?? DATA_VOLUME_DIR;
  return `#!/bin/bash
# gpu-fleet: Docker's data and the job folders' disks on a volume of their own.
set -euo pipefail
dev=$(readlink -f ${o.device ?? DATA_VOLUME_DEVICE} || true)
dir=${dir}
disks=${o.disksDir ?? JOB_DISKS_DIR}
env_file=${o.envFile ?? DATA_VOLUME_ENV}
fstab=${o.fstab ?? '/etc/fstab'}
mkdir -p "$(dirname "$env_file")"
if [ -z "$dev" ] || [ ! -b "$dev" ]; then
  echo "gpu-fleet: no data volume at ${o.device ?? DATA_VOLUME_DEVICE}; Docker's data stays on the root volume" >&2
  echo GPU_FLEET_LAYER_QUOTA=0 > "$env_file"
  exit 0
fi
blkid "$dev" >/dev/null 2>&1 || mkfs.xfs -q "$dev"
uuid=$(blkid -o value -s UUID "$dev")
mkdir -p "$dir"
if ! mountpoint -q "$dir"; then
  mount -o prjquota "$dev" "$dir" 2>/dev/null || mount "$dev" "$dir"
fi
grep -qs " $dir " "$fstab" || echo "UUID=$uuid $dir xfs defaults,nofail,prjquota 0 2" >> "$fstab"
mkdir -p "$dir/docker" "$dir/disks" "$disks"
grep -qs " $disks " "$fstab" || echo "$dir/disks $disks none bind,nofail 0 0" >> "$fstab"
chmod 0700 "$dir/disks"
mountpoint -q "$disks" || mount --bind "$dir/disks" "$disks"
if findmnt -no OPTIONS --mountpoint "$dir" | grep -Eq '(^|,)(prjquota|pquota)(,|$)'; then
  echo GPU_FLEET_LAYER_QUOTA=1 > "$env_file"
else
  echo "gpu-fleet: $dir has no project quotas here; the agent stops a container past its share instead" >&2
  echo GPU_FLEET_LAYER_QUOTA=0 > "$env_file"
fi
`;
}

/**
 * The systemd slice every job's container runs under (`--cgroup-parent`): the cap on all jobs
 * together, from `gpu-fleet agent jobs-slice` (what the machine has less the reserve the agent,
 * dockerd and the system keep: core/container-limits.ts).
 */
export const JOBS_SLICE_FILE = `/etc/systemd/system/${JOBS_CGROUP.slice}`;

export const JOB_DISK_HELPER = '/usr/local/sbin/gpu-fleet-job-disk';
/** Where each job folder's disk image lives (beside the jobs folder, never inside a job's). */
export const JOB_DISKS_DIR = `${AGENT_HOME}/disks`;

/**
 * The root-owned helper the agent runs through sudo to give one job folder under `jobsDir` a disk
 * of its own (`make <folder> <MiB>`: a sparse file under `disksDir`, ext4 with nothing reserved,
 * loop-mounted `nosuid,nodev` on the folder, which keeps its owner and mode), or to take it back
 * (`drop <folder>`). A job that fills its folder fills its own disk only: its neighbours' folders,
 * Docker's data and the agent's state keep their room. Idempotent; links, folders outside
 * `jobsDir` and sizes under 16 MiB are refused.
 */
export function jobDiskScript(jobsDir: string = JOBS_DIR, disksDir: string = JOB_DISKS_DIR): string {
  return `#!/bin/bash
# gpu-fleet: one job folder under ${jobsDir}, one disk of its own.
set -euo pipefail
root=${jobsDir}
disks=${disksDir}
usage() { echo "usage: $0 make <a folder under $root> <MiB> | drop <a folder under $root>" >&2; exit 2; }
target() {
  if [ -L "$1" ]; then echo "refused: $1 is a link" >&2; exit 2; fi
  local t
  t=$(realpath -e -- "$1")
  case "$t" in
    "$root"/?*) ;;
    *) echo "refused: $1 is not under $root" >&2; exit 2 ;;
  esac
  echo "$t"
}
image_of() { echo "$disks/$(printf '%s' "$1" | sha256sum | cut -c1-32).img"; }
case "\${1:-}" in
  make)
    [ "$#" -eq 3 ] && [[ "$3" =~ ^[0-9]{1,9}$ ]] && [ "$3" -ge 16 ] || usage
    t=$(target "$2")
    if mountpoint -q "$t"; then exit 0; fi
    img=$(image_of "$t")
    mkdir -p "$disks" && chmod 0700 "$disks"
    owner=$(stat -c %u:%g "$t")
    mode=$(stat -c %a "$t")
    rm -f "$img"
    truncate -s "$3M" "$img"
    mkfs.ext4 -q -F -m 0 -E lazy_itable_init=1,lazy_journal_init=1 "$img"
    mount -o loop,nosuid,nodev "$img" "$t"
    rmdir "$t/lost+found" 2>/dev/null || true
    chown "$owner" "$t"
    chmod "$mode" "$t"
    ;;
  drop)
    [ "$#" -eq 2 ] || usage
    if [ ! -e "$2" ] && [ ! -L "$2" ]; then exit 0; fi
    t=$(target "$2")
    img=$(image_of "$t")
    if mountpoint -q "$t"; then umount "$t" 2>/dev/null || umount -l "$t"; fi
    rm -f "$img"
    ;;
  *) usage ;;
esac
`;
}

/** What the agent's user may run as root: MIG changes and its three helpers (folders, peers, job disks), nothing else. */
export function agentSudoers(): string {
  return `# gpu-fleet node agent: MIG instances per job, and removal of its job folders.
Defaults:${AGENT_USER} !requiretty
${AGENT_USER} ALL=(root) NOPASSWD: ${NVIDIA_SMI} mig *, ${CLEAN_JOB_DIR_HELPER} ${JOBS_DIR}/*, ${PEERS_HELPER} *, ${JOB_DISK_HELPER} *
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

export const PORT_WALL_CHAIN = 'GPU-FLEET-IN';
export const GANG_PEERS_CHAIN = 'GPU-FLEET-GANGS';
export const PEERS_HELPER = '/usr/local/sbin/gpu-fleet-peers';

/**
 * The part of the node's wall that decides who reaches the machine's own ports (what host-network
 * containers listen on: a gang's rendezvous port and NCCL's ports, a replica's port; and the
 * agent's /metrics). The security group lets the fleet's machines reach each other on every port
 * (a gang's ranks need NCCL's ports, chosen at run time), so the machine itself narrows it:
 * - `openPorts` (the replicas' ports, /metrics) pass: the security group already lets only the
 *   load balancer, or the scrapers the config names, reach them;
 * - what the machine's gangs need passes from their other machines only: the agent opens each
 *   attempt's peers through {@link peersHelperScript} when the attempt starts and closes them when
 *   it ends;
 * - replies, loopback and ICMP pass; everything else is refused.
 * `interfaces`: only packets arriving on these (default every interface) are judged.
 */
export function portWallScript(o: { readonly openPorts?: readonly number[]; readonly interfaces?: readonly string[] } = {}): string {
  const ports = [...new Set(o.openPorts ?? [])].sort((a, b) => a - b);
  const jumps = o.interfaces?.length ? o.interfaces.map((i) => `-i '${i}' `) : [''];
  return `#!/bin/bash
# gpu-fleet: the machine's own ports, from who needs them only.
set -euo pipefail
port_wall() {
  local ipt=$1 icmp=$2
  $ipt -w -N ${GANG_PEERS_CHAIN} 2>/dev/null || true
  if $ipt -w -N ${PORT_WALL_CHAIN} 2>/dev/null; then
    $ipt -w -A ${PORT_WALL_CHAIN} -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
    $ipt -w -A ${PORT_WALL_CHAIN} -i lo -j RETURN
    $ipt -w -A ${PORT_WALL_CHAIN} -p "$icmp" -j RETURN
${
  ports.length > 0
    ? `    $ipt -w -A ${PORT_WALL_CHAIN} -p tcp -m multiport --dports ${ports.join(',')} -j RETURN
`
    : ''
}    $ipt -w -A ${PORT_WALL_CHAIN} -j ${GANG_PEERS_CHAIN}
    $ipt -w -A ${PORT_WALL_CHAIN} -j REJECT
  fi
${jumps.map((j) => `  $ipt -w -C INPUT ${j}-j ${PORT_WALL_CHAIN} 2>/dev/null || $ipt -w -A INPUT ${j}-j ${PORT_WALL_CHAIN}`).join('\n')}
}
port_wall iptables icmp
if command -v ip6tables >/dev/null && ip6tables -w -L INPUT >/dev/null 2>&1; then port_wall ip6tables ipv6-icmp; fi
`;
}

/**
 * The root-owned helper the agent runs through sudo to let one attempt's other machines reach this
 * one (`open <key> <address>…`: the attempt's chain holds exactly those addresses, replacing what
 * it held), to open a replica's port to whoever the security group lets through (`open-port <key>
 * <port>`), to shut an attempt's out again (`close <key>`), or to drop every attempt's (`reset`,
 * when the agent starts). Keys are 1 to 16 lower-case hex digits; addresses are IPv4 or IPv6
 * literals. Anything else is refused.
 */
export function peersHelperScript(): string {
  return `#!/bin/bash
# gpu-fleet: the machines of this machine's gangs reach it; no other machine does.
set -euo pipefail
usage() { echo "usage: $0 open <key> <address>... | open-port <key> <port> | close <key> | reset" >&2; exit 2; }
ipt_for() { case "$1" in *:*) echo ip6tables ;; *) echo iptables ;; esac; }
drop() {
  local ipt=$1 chain=$2
  while $ipt -w -D ${GANG_PEERS_CHAIN} -j "$chain" 2>/dev/null; do :; done
  $ipt -w -F "$chain" 2>/dev/null || true
  $ipt -w -X "$chain" 2>/dev/null || true
}
case "\${1:-}" in
  open)
    [ "$#" -ge 3 ] || usage
    key=$2; shift 2
    [[ "$key" =~ ^[0-9a-f]{1,16}$ ]] || { echo "refused: the key must be 1 to 16 hex digits" >&2; exit 2; }
    for a in "$@"; do
      [[ "$a" =~ ^[0-9]{1,3}(\\.[0-9]{1,3}){3}$ || "$a" =~ ^[0-9a-fA-F:]{2,39}$ ]] || { echo "refused: $a is not an address" >&2; exit 2; }
    done
    chain="GF-P-$key"
    for ipt in iptables ip6tables; do
      command -v $ipt >/dev/null && $ipt -w -L ${GANG_PEERS_CHAIN} >/dev/null 2>&1 || continue
      $ipt -w -N "$chain" 2>/dev/null || $ipt -w -F "$chain"
      for a in "$@"; do if [ "$(ipt_for "$a")" = "$ipt" ]; then $ipt -w -A "$chain" -s "$a" -j ACCEPT; fi; done
      $ipt -w -C ${GANG_PEERS_CHAIN} -j "$chain" 2>/dev/null || $ipt -w -A ${GANG_PEERS_CHAIN} -j "$chain"
    done
    ;;
  open-port)
    [ "$#" -eq 3 ] && [[ "$2" =~ ^[0-9a-f]{1,16}$ ]] && [[ "$3" =~ ^[0-9]{1,5}$ ]] && [ "$3" -ge 1 ] && [ "$3" -le 65535 ] || usage
    chain="GF-P-$2"
    for ipt in iptables ip6tables; do
      command -v $ipt >/dev/null && $ipt -w -L ${GANG_PEERS_CHAIN} >/dev/null 2>&1 || continue
      $ipt -w -N "$chain" 2>/dev/null || true
      $ipt -w -C "$chain" -p tcp --dport "$3" -j ACCEPT 2>/dev/null || $ipt -w -A "$chain" -p tcp --dport "$3" -j ACCEPT
      $ipt -w -C ${GANG_PEERS_CHAIN} -j "$chain" 2>/dev/null || $ipt -w -A ${GANG_PEERS_CHAIN} -j "$chain"
    done
    ;;
  close)
    [ "$#" -eq 2 ] && [[ "$2" =~ ^[0-9a-f]{1,16}$ ]] || usage
    for ipt in iptables ip6tables; do if command -v $ipt >/dev/null; then drop $ipt "GF-P-$2"; fi; done
    ;;
  reset)
    [ "$#" -eq 1 ] || usage
    for ipt in iptables ip6tables; do
      command -v $ipt >/dev/null && $ipt -w -L ${GANG_PEERS_CHAIN} >/dev/null 2>&1 || continue
      for chain in $($ipt -w -S | awk '$1 == "-N" && $2 ~ /^GF-P-/ { print $2 }'); do drop $ipt "$chain"; done
    done
    ;;
  *) usage ;;
esac
`;
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
export function agentUnit(nodeBin: string, extraArgs = ''): string {
  return `[Unit]
Description=gpu-fleet node agent
After=network-online.target docker.service gpu-fleet-wall.service
Wants=network-online.target docker.service
Requires=gpu-fleet-wall.service

[Service]
User=${AGENT_USER}
Group=${AGENT_USER}
SupplementaryGroups=docker
# No ambient capability: it reads a job's files through their folder's group, never past their modes (its two root
# commands go through sudo, so the bounding set stays).
# The kernel's OOM killer takes a job before the agent (jobs are capped below the machine: gpu-fleet-jobs.slice).
OOMScoreAdjust=-900
Environment=HOME=${AGENT_HOME}
EnvironmentFile=/etc/gpu-fleet/agent.env
EnvironmentFile=-${DATA_VOLUME_ENV}
ExecStart=${nodeBin} /opt/gpu-fleet/gpu-fleet-agent.mjs agent run --runner docker --nvidia-smi ${NVIDIA_SMI} --sudo-helper ${CLEAN_JOB_DIR_HELPER} --peers-helper ${PEERS_HELPER} --disk-helper ${JOB_DISK_HELPER}${extraArgs}
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

/** The lease file the agent writes at each renewal (its work folder's `lease.json`), which the watchdog reads. */
export const LEASE_FILE = `${AGENT_HOME}/lease.json`;

/**
 * The machine's watchdog: a root service a timer runs every 15 s, outside the agent, that stops
 * every job container once the agent's lease file is past the lease and the fence (agent/watchdog.ts,
 * core node-rules `watchdogStops`). The agent's own fence covers an agent that lives but is cut off;
 * this covers one that died, hung, or cannot write: its containers are stopped before the control
 * plane may run their attempts elsewhere.
 */
export function watchdogUnits(nodeBin: string): { service: string; timer: string } {
  return {
    service: `[Unit]
Description=gpu-fleet watchdog: stop the job containers when the agent's lease has run out
After=docker.service
Requires=docker.service

[Service]
Type=oneshot
ExecStart=${nodeBin} /opt/gpu-fleet/gpu-fleet-agent.mjs agent watchdog --lease-file ${LEASE_FILE} --stop-grace-sec 30
TimeoutStartSec=120
`,
    timer: `[Unit]
Description=gpu-fleet watchdog, every 15 s

[Timer]
OnBootSec=60
OnUnitActiveSec=15
AccuracySec=1s

[Install]
WantedBy=timers.target
`,
  };
}

/** The commands that install the watchdog's two units and start its timer ($NODE_BIN set). */
function watchdogSetup(): string[] {
  const units = watchdogUnits('${NODE_BIN}');
  return [
    `cat > /etc/systemd/system/gpu-fleet-watchdog.service <<EOF\n${units.service}EOF`,
    `cat > /etc/systemd/system/gpu-fleet-watchdog.timer <<EOF\n${units.timer}EOF`,
  ];
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
  /** The machine's ports whoever the security group lets through may reach (the services' ports the stack's load balancer uses). */
  openPorts?: readonly number[];
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
    ...nodeWalls(o),
    `aws s3 cp --region ${o.region} ${o.assetUrl} /opt/gpu-fleet/gpu-fleet-agent.mjs`,
    `cat > /etc/gpu-fleet/agent.env <<'EOF'\n${envFile.join('\n')}\nEOF`,
    `chown root:${AGENT_USER} /etc/gpu-fleet/agent.env && chmod 0640 /etc/gpu-fleet/agent.env`,
    ...(o.migEnabled ? [`${NVIDIA_SMI} -mig 1 || true  # MIG mode on; instances are created per job by the agent`] : []),
    `cat > /etc/systemd/system/gpu-fleet-agent.service <<EOF\n${agentUnit('${NODE_BIN}')}EOF`,
    ...watchdogSetup(),
    // Every job's container under one slice, capped together below what the machine has.
    `"$NODE_BIN" /opt/gpu-fleet/gpu-fleet-agent.mjs agent jobs-slice --nvidia-smi ${NVIDIA_SMI} > ${JOBS_SLICE_FILE}`,
    'systemctl daemon-reload',
    'systemctl enable --now gpu-fleet-wall.service',
    'systemctl enable --now gpu-fleet-agent.service',
    'systemctl enable --now gpu-fleet-watchdog.timer',
  ];
}

/**
 * What every machine of the fleet gets at boot before its agent, on AWS and GCP alike (`$NODE_BIN`
 * set): the agent's user, the jobs folder mounted nosuid,nodev, the root helpers and what the agent
 * may run through sudo, the walls (metadata servers, the jobs' bridge, the machine's own ports) with
 * their unit, and the engine's defaults for every container. Starts nothing.
 */
function nodeWalls(o: { readonly prometheusPort?: number; readonly openPorts?: readonly number[] }): string[] {
  return [
    // The agent's own user: in the docker group, with its home as the work folder.
    'getent group docker >/dev/null || groupadd --system docker',
    `id -u ${AGENT_USER} >/dev/null 2>&1 || useradd --system --home-dir ${AGENT_HOME} --shell /usr/sbin/nologin --groups docker ${AGENT_USER}`,
    `mkdir -p /opt/gpu-fleet /etc/gpu-fleet ${JOBS_DIR}`,
    `chown -R ${AGENT_USER}:${AGENT_USER} ${AGENT_HOME} && chmod 0750 ${AGENT_HOME}`,
    // Job folders: nosuid,nodev, now and at every boot.
    `grep -qs ' ${JOBS_DIR} ' /etc/fstab || echo '${JOBS_DIR} ${JOBS_DIR} none bind,nosuid,nodev 0 0' >> /etc/fstab`,
    `bash <<'EOF'\n${jobFoldersMountScript()}EOF`,
    `cat > ${CLEAN_JOB_DIR_HELPER} <<'EOF'\n${cleanJobDirScript()}EOF`,
    `chown root:root ${CLEAN_JOB_DIR_HELPER} && chmod 0755 ${CLEAN_JOB_DIR_HELPER}`,
    `cat > /etc/sudoers.d/gpu-fleet-agent <<'EOF'\n${agentSudoers()}EOF`,
    'chmod 0440 /etc/sudoers.d/gpu-fleet-agent && visudo -cf /etc/sudoers.d/gpu-fleet-agent',
    // The metadata wall, in place before the agent takes work and again after each docker restart.
    // Its second part, the machine's own ports (run by the first, so the one unit installs both).
    `cat > ${WALL_SCRIPT}-ports <<'EOF'\n${portWallScript({ openPorts: [...(o.prometheusPort !== undefined ? [o.prometheusPort] : []), ...(o.openPorts ?? [])] })}EOF`,
    `cat > ${WALL_SCRIPT} <<'EOF'\n${metadataWallScript()}${WALL_SCRIPT}-ports\nEOF`,
    `cat > ${PEERS_HELPER} <<'EOF'\n${peersHelperScript()}EOF`,
    `cat > ${JOB_DISK_HELPER} <<'EOF'\n${jobDiskScript()}EOF`,
    `chown root:root ${JOB_DISK_HELPER} && chmod 0755 ${JOB_DISK_HELPER}`,
    `chown root:root ${PEERS_HELPER} ${WALL_SCRIPT}-ports && chmod 0755 ${PEERS_HELPER} ${WALL_SCRIPT}-ports`,
    `chown root:root ${WALL_SCRIPT} && chmod 0755 ${WALL_SCRIPT}`,
    `cat > /etc/systemd/system/gpu-fleet-wall.service <<'EOF'\n${wallUnit()}EOF`,
    // Docker's data and the job folders' disks on the data volume, where the machine has one (before the engine starts again).
    `cat > ${DATA_VOLUME_HELPER} <<'EOF'\n${dataVolumeScript()}EOF`,
    `chown root:root ${DATA_VOLUME_HELPER} && chmod 0755 ${DATA_VOLUME_HELPER} && ${DATA_VOLUME_HELPER}`,
    // The engine's own defaults for every container, merged into what the image's daemon.json has (its runtimes stay),
    // and its data root on the data volume when that is mounted.
    `DATA_ROOT=$(mountpoint -q ${DATA_VOLUME_DIR} && echo ${DATA_VOLUME_DIR}/docker || true) "$NODE_BIN" -e 'const fs=require("fs"),f="/etc/docker/daemon.json";let c={};try{c=JSON.parse(fs.readFileSync(f,"utf8"))}catch{}fs.mkdirSync("/etc/docker",{recursive:true});fs.writeFileSync(f,JSON.stringify({...c,...${JSON.stringify(DOCKER_DAEMON_SETTINGS)},...(process.env.DATA_ROOT?{"data-root":process.env.DATA_ROOT}:{})},null,2))'`,
    'systemctl restart docker',
  ];
}

/** What a GCP machine's agent needs to run: where its bundle is, and how it reaches the control plane. */
export interface GceAgentSetup {
  /** The agent bundle in Cloud Storage (gs://…/gpu-fleet-agent.mjs), readable by the machines' service account. */
  readonly bundleUrl: string;
  /** The agent API's URL for GCP machines (the stack's GceAgentApiUrl output). */
  readonly apiUrl: string;
  /** The audience of the machines' identity tokens (the stack's GceAgentApiAudience output). */
  readonly audience: string;
  /** The control plane's AWS region. */
  readonly region: string;
  /** The fleet's S3 checkpoint bucket (a job moved from AWS resumes from it, through the API). */
  readonly checkpointBucket: string;
  /** This region's Cloud Storage checkpoint root (gs://bucket/prefix/), where the machine saves. */
  readonly checkpointStore: string;
  readonly noticeMarginSec?: number;
}

/**
 * A GCE instance template's startup script (its `startup-script` metadata): the same walls as an
 * AWS machine's boot (GCE's metadata server sits at 169.254.169.254 too, and has no hop limit, so
 * without them any container takes the service account's token), installed before anything else and
 * again at every boot (GCE runs the script at each start). It installs Node.js from the
 * distribution (apt or dnf) for the engine settings and the agent. With `agent`, it also installs
 * the agent: its bundle from Cloud Storage, its settings, and its unit, which calls the agent API's
 * unsigned URL with the machine's instance identity token (cloud/gcp/identity-token.ts). No AWS
 * key is written to the disk: the token, which only this machine's metadata server issues (and only
 * root and the agent may ask it), is its identity.
 */
export function gceStartupScript(
  o: { readonly prometheusPort?: number; readonly openPorts?: readonly number[]; readonly agent?: GceAgentSetup } = {},
): string {
  const a = o.agent;
  const envFile = a
    ? [
        ...(o.prometheusPort !== undefined ? [`GPU_FLEET_PROMETHEUS_PORT=${o.prometheusPort}`] : []),
        `AWS_REGION=${a.region}`,
        `GPU_FLEET_AGENT_API_URL=${a.apiUrl}`,
        `GPU_FLEET_AGENT_API_AUDIENCE=${a.audience}`,
        `GPU_FLEET_CHECKPOINT_BUCKET=${a.checkpointBucket}`,
        `GPU_FLEET_NOTICE_MARGIN_SEC=${a.noticeMarginSec ?? 30}`,
        `GPU_FLEET_AGENT_DIR=${AGENT_HOME}`,
      ]
    : [];
  return [
    '#!/bin/bash',
    '# gpu-fleet: the walls of a GCP machine of the fleet (https://cloud.google.com/compute/docs/instances/startup-scripts/linux).',
    'set -euo pipefail',
    '(command -v node >/dev/null || (apt-get update -qq && apt-get install -y -qq nodejs) || dnf install -y nodejs) >/var/log/gpu-fleet-node-install.log 2>&1',
    'NODE_BIN=$(command -v node)',
    ...nodeWalls(o),
    'systemctl daemon-reload',
    'systemctl enable gpu-fleet-wall.service',
    // At every start, not only the first: the rules live in the kernel.
    'systemctl restart gpu-fleet-wall.service',
    ...(a
      ? [
          // The bundle, with the machine's service account (gcloud is on Google's images).
          `gcloud storage cp ${a.bundleUrl} /opt/gpu-fleet/gpu-fleet-agent.mjs`,
          `cat > /etc/gpu-fleet/agent.env <<'EOF'\n${envFile.join('\n')}\nEOF`,
          `chown root:${AGENT_USER} /etc/gpu-fleet/agent.env && chmod 0640 /etc/gpu-fleet/agent.env`,
          `cat > /etc/systemd/system/gpu-fleet-agent.service <<EOF\n${agentUnit('${NODE_BIN}', ` --checkpoint-store ${a.checkpointStore}`)}EOF`,
          ...watchdogSetup(),
          `"$NODE_BIN" /opt/gpu-fleet/gpu-fleet-agent.mjs agent jobs-slice --nvidia-smi ${NVIDIA_SMI} > ${JOBS_SLICE_FILE}`,
          'systemctl daemon-reload',
          'systemctl enable gpu-fleet-agent.service',
          'systemctl restart gpu-fleet-agent.service',
          'systemctl enable gpu-fleet-watchdog.timer',
          'systemctl restart gpu-fleet-watchdog.timer',
        ]
      : []),
    '',
  ].join('\n');
}
