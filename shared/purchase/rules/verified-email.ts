// A `buyers: verified-email` sale sells only to buyers whose identity provider says their email is
// verified: the token's `email_verified` claim (OpenID Connect) is `true`. One account per verified
// address is what stops a bot farm signing up by the thousand. Judged at every door, so a buyer
// refused here never takes a place in a waiting room or a draw.
//
// Behind a gateway (AUTH_MODE=trusted-header) the API sees no claims: such a sale sells to nobody
// unless the gateway itself only lets verified buyers through to it.
import { HttpError } from '../../runtime/errors.js';
import type { PurchaseRule } from './rule.js';

export const verifiedEmail: PurchaseRule = {
  doors: ['purchase', 'join', 'enter'],
  applies: (sale) => sale.buyers === 'verified-email',
  judge({ buyer }) {
    if (buyer.claims.email_verified !== true) throw new HttpError('email_not_verified');
    return undefined;
  },
  refusals: ['email_not_verified'],
};
