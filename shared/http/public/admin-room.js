// A queue sale's waiting room in the live view (GET .../live's `room`, its panel `room`).
import { setText } from './admin-session.js';

const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;

export const roomLive = {
  key: 'room',
  render(room) {
    setText('room-waiting', String(room.waiting));
    setText(
      'room-joined',
      room.open
        ? `${plural(room.joined, 'buyer', 'buyers')} joined`
        : `${plural(room.joined, 'buyer', 'buyers')} joined · places drawn at the start`,
    );
    setText('room-admitted', String(room.admitted));
    setText('room-outstanding', `${plural(room.passesOutstanding, 'pass', 'passes')} can still buy`);
    setText('room-used', String(room.passesUsed));
    setText('room-expired', String(room.passesExpired));
    setText('room-no-show', room.noShowRate === null ? '–' : `${(room.noShowRate * 100).toFixed(1)}%`);
  },
};
