// An order's states in Postgres and the moves between them: the one home of both. The schema's
// CHECKs (sql/0009_order_states.sql, held to this list by test/order-states.test.ts), the
// conditional updates (orders/queries.ts), the invariants, the reconciliation and its metrics, the
// admin counts and the tests' settle() all read them from here, so a new state is a line in
// STATE_RULES, its transitions and a migration.
//
// A state's literal goes into SQL as text, not as a parameter: the partial indexes (`where status =
// 'pending'`) are only used when the planner sees the literal. Only the constants below ever reach
// those strings, never input.

export const ORDER_STATES = ['pending', 'paid', 'expired', 'cancelled'] as const;
export type OrderState = (typeof ORDER_STATES)[number];

interface StateRules {
  /** Its units are the buyer's: counted against the per-user limit, in no other place of the stock. */
  holds: boolean;
  /** Closed unpaid (closed_at set): its units go back on sale once, recorded in restored_at. */
  restores: boolean;
  /** What an operator is told it means (/admin, the OpenAPI document). */
  describe: string;
}

export const STATE_RULES: Record<OrderState, StateRules> = {
  pending: { holds: true, restores: false, describe: 'awaiting payment' },
  paid: { holds: true, restores: false, describe: 'paid' },
  expired: { holds: false, restores: true, describe: 'closed unpaid' },
  cancelled: { holds: false, restores: true, describe: 'cancelled by the buyer' },
};

interface Transition {
  /** null: the order is no row yet (a winner queued in Redis). */
  from: OrderState | null;
  to: OrderState;
}

/**
 * Every move an order makes, by the action that makes it. Each is one conditional write that says
 * what it expects (`where status = <from>`), so of two actions from one state exactly one wins.
 */
export const TRANSITIONS = {
  /** The writer inserts a queued winner. */
  write: { from: null, to: 'pending' },
  /** The API inserts a still-queued order its buyer cancelled (the primary key decides against the writer). */
  cancelQueued: { from: null, to: 'cancelled' },
  /** A payment inside the window. */
  pay: { from: 'pending', to: 'paid' },
  /** The deadline passed unpaid. */
  expire: { from: 'pending', to: 'expired' },
  /** The buyer gives it back inside the window. */
  cancel: { from: 'pending', to: 'cancelled' },
} as const satisfies Record<string, Transition>;

export type OrderAction = keyof typeof TRANSITIONS;

const where = (rule: (r: StateRules) => boolean) => ORDER_STATES.filter((s) => rule(STATE_RULES[s]));

/** States whose units the buyer holds: pending and paid. */
export const HOLDING: readonly OrderState[] = where((r) => r.holds);
/** States that give their units back: expired and cancelled. */
export const RESTORING: readonly OrderState[] = where((r) => r.restores);
/** States an action can still move an order out of: not final. */
export const OPEN: readonly OrderState[] = ORDER_STATES.filter((s) =>
  Object.values(TRANSITIONS).some((t) => t.from === s),
);

/** Whether `action` may move an order in `state`. */
export const allows = (action: OrderAction, state: OrderState | null): boolean => TRANSITIONS[action].from === state;

/** A state as an SQL literal: `status = ${sqlState('pending')}`. */
export const sqlState = (state: OrderState): string => `'${state}'`;

/** States as an SQL list: `status in ${sqlStates(RESTORING)}`. */
export const sqlStates = (states: readonly OrderState[]): string => `(${states.map(sqlState).join(', ')})`;
