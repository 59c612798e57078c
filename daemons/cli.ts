#!/usr/bin/env node
// `flashsale`: the one way to start anything. The commands are daemons/cli/run.ts's; a refused one
// ends the process with its code at once.
import { hideBin } from 'yargs/helpers';
import { runCli } from './cli/run.js';

const code = await runCli(hideBin(process.argv));
// A moment for a log transport's worker (pretty output in development) to print the reason.
if (code !== undefined) setTimeout(() => process.exit(code), 50);
