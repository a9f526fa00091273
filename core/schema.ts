import { config } from 'zod/mini';
import en from 'zod/v4/locales/en.js';

/**
 * zod as gpu-fleet's schemas use it: the mini API (`import * as z from 'zod/mini'` in each module
 * with a schema: the same checks as zod's classic API, in a form a bundler cuts to what is used;
 * the classic API weighed 450 KiB in each Lambda bundle), with the English messages the classic
 * API gives by default. A module with a schema imports this one first, for that setting.
 */
config(en());
