// A connection to Redis in any of its forms (connect.ts makes them): a type of its own, so the
// modules connect.ts builds on (scripts.ts) can name it without importing connect.ts back.
import type { Cluster, Redis } from 'ioredis';

export type RedisClient = Redis | Cluster;
