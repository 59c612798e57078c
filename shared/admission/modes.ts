// The admission modes this build has (the interface and the store are mode.ts): a new mode is a
// folder of its own and one line in MODES. Importing this module registers them; the app, the
// admission loop, the live view and the CLI import it before they ask a sale's mode.
import { drawMode } from './draw/mode.js';
import { registerMode, type AdmissionMode } from './mode.js';
import { queueMode } from './room/mode.js';

export const MODES: readonly AdmissionMode[] = [queueMode, drawMode];

for (const mode of MODES) registerMode(mode);

export { ADMISSIONS, modeOf, registeredModes, registerMode, type AdmissionMode } from './mode.js';
