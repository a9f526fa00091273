#!/usr/bin/env node
// The `gpu-fleet` command: runs the TypeScript CLI through tsx, so no build step is needed.
import { register } from 'tsx/esm/api';

register();
process.env.GPU_FLEET_CLI = '1';
// gpu-fleet runs on Node 20 and later (package.json engines): the AWS SDK's notice that its releases from
// January 2027 need Node 22 is for whoever upgrades the SDK, not for every command's user (the SDK's own switch).
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
await import('../cli/main.ts');
