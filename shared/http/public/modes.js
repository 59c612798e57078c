// The admission modes the buyer's page has a part for (what a part gives: mode.js): a new mode's
// page is a module of its own and one line in PAGE_MODES. app.js imports this before anything asks.
import { drawPage } from './draw.js';
import { registerPageMode } from './mode.js';
import { queuePage } from './queue.js';

export const PAGE_MODES = [queuePage, drawPage];

for (const mode of PAGE_MODES) registerPageMode(mode);
