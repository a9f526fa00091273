// Builds the container tests' local image (no registry): `.ci/run` runs it once the engine is up.
import { dockerProblem, ensureTestImage } from './engine.ts';

const problem = dockerProblem();
if (problem) {
  console.error(`cannot build the test image: ${problem}`);
  process.exit(1);
}
console.log(`test image ${ensureTestImage()} is ready`);
