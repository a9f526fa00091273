// A small training-like job for the agent tests: counts steps, checkpoints its count the way
// gpu-fleet's protocol says (a folder, then checkpoint.json written by rename), checkpoints on
// its checkpoint signal and exits, and resumes from $GPU_FLEET_RESUME_DIR.
//   node counter-job.mjs <target-steps> [step-ms] [checkpoint-every-steps] [--ignore-signal] [--ignore-term]
// --ignore-signal: it never checkpoints on its signal; --ignore-term: it says so and carries on when asked to stop.
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const target = Number(process.argv[2] ?? 100);
const stepMs = Number(process.argv[3] ?? 20);
const every = Number(process.argv[4] ?? 0);
const ignoreSignal = process.argv.includes('--ignore-signal');
const ignoreTerm = process.argv.includes('--ignore-term');
const dir = process.env.GPU_FLEET_CHECKPOINT_DIR;
const resume = process.env.GPU_FLEET_RESUME_DIR;

const rank = process.env.GPU_FLEET_NODE_RANK;
let step = 0;
let resumedRank;
if (resume && existsSync(join(resume, 'state.json')))
  ({ step, rank: resumedRank } = JSON.parse(readFileSync(join(resume, 'state.json'), 'utf8')));
const startedAt = step;
console.log(
  JSON.stringify({
    event: 'start',
    job: process.env.GPU_FLEET_JOB_ID,
    attempt: process.env.GPU_FLEET_ATTEMPT,
    step,
    devices: process.env.CUDA_VISIBLE_DEVICES,
    rank,
    // How often the product asks it to save of its own accord (seconds).
    saveEverySec: process.env.GPU_FLEET_CHECKPOINT_INTERVAL_SEC,
    // Which rank wrote the checkpoint part this rank resumed from (sharded checkpoints: each rank its own).
    resumedRank,
  }),
);

function checkpoint(onSignal = false) {
  if (!dir) return;
  // The ranks of a gang name a checkpoint alike (FSDP and DeepSpeed save one step on every rank): $SIGNAL_CHECKPOINT_NAME does that here.
  // $CHECKPOINT_NAME: every checkpoint goes to that one folder, over the last (`latest/`, as many training scripts do).
  const name =
    process.env.CHECKPOINT_NAME ??
    (onSignal && process.env.SIGNAL_CHECKPOINT_NAME ? process.env.SIGNAL_CHECKPOINT_NAME : `step-${String(step).padStart(6, '0')}`);
  mkdirSync(join(dir, name), { recursive: true });
  // $CHECKPOINT_PAYLOAD_KIB: a file of that size whose every byte says the step (a torn mix of two saves shows in it).
  if (process.env.CHECKPOINT_PAYLOAD_KIB)
    writeFileSync(join(dir, name, 'payload.bin'), Buffer.alloc(Number(process.env.CHECKPOINT_PAYLOAD_KIB) * 1024, step % 251));
  writeFileSync(join(dir, name, 'state.json'), JSON.stringify({ step, rank }));
  writeFileSync(join(dir, 'checkpoint.json.tmp'), JSON.stringify({ path: name, progressSec: step }));
  renameSync(join(dir, 'checkpoint.json.tmp'), join(dir, 'checkpoint.json'));
}

const signal = process.env.GPU_FLEET_CHECKPOINT_SIGNAL ?? 'SIGUSR1';
process.on(signal, () => {
  if (ignoreSignal) return;
  checkpoint(true);
  console.log(JSON.stringify({ event: 'checkpointed-on-signal', step, ranSteps: step - startedAt }));
  process.exit(0);
});
process.on('SIGTERM', () => {
  console.log(JSON.stringify({ event: ignoreTerm ? 'ignored-sigterm' : 'terminated', step }));
  if (!ignoreTerm) process.exit(143);
});

const timer = setInterval(() => {
  step++;
  if (every > 0 && step % every === 0) checkpoint();
  if (step >= target) {
    clearInterval(timer);
    console.log(JSON.stringify({ event: 'done', step, ranSteps: step - startedAt }));
    process.exit(Number(process.env.EXIT_CODE ?? 0));
  }
}, stepMs);
