// The admission modes the live view shows figures of: each gives the key of its figures in GET
// .../live (null for other sales), which is also its panel's data-testid, and render(figures, sale).
// A new mode's panel is a module of its own and one line in LIVE_MODES.
import { drawLive } from './admin-draw.js';
import { roomLive } from './admin-room.js';

export const LIVE_MODES = [roomLive, drawLive];
