#!/usr/bin/env node
// The `gpu-fleet` command: runs the TypeScript CLI through tsx, so no build step is needed.
import { register } from 'tsx/esm/api';

register();
process.env.GPU_FLEET_CLI = '1';
await import('../cli/main.ts');
