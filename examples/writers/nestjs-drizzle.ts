// NestJS + Drizzle ORM: the order and its event in one transaction.
import { Injectable } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { drizzle, NodePgDatabase } from 'drizzle-orm/node-postgres';
import { integer, jsonb, pgTable, text, timestamp, uuid } from 'drizzle-orm/pg-core';
import { Pool } from 'pg';

export const orders = pgTable('orders', {
  id: uuid('id').primaryKey(),
  customerId: text('customer_id').notNull(),
  totalCents: integer('total_cents').notNull(),
});

// Mirrors sql/outbox.sql.
export const outbox = pgTable('outbox', {
  id: uuid('id').primaryKey(),
  aggregateType: text('aggregate_type').notNull(),
  aggregateId: text('aggregate_id').notNull(),
  eventType: text('event_type').notNull(),
  payload: jsonb('payload').notNull(),
  createdAt: timestamp('created_at', { withTimezone: true }).defaultNow(),
});

/** Version 1 of the OrderPlaced event: what consumers need, not just an id. */
export interface OrderPlacedV1 {
  version: 1;
  orderId: string;
  customerId: string;
  totalCents: number;
}

@Injectable()
export class OrdersService {
  private readonly db: NodePgDatabase = drizzle(new Pool({ connectionString: process.env.DATABASE_URL }));

  async placeOrder(customerId: string, totalCents: number): Promise<string> {
    const orderId = randomUUID();
    await this.db.transaction(async (tx) => {
      await tx.insert(orders).values({ id: orderId, customerId, totalCents });
      const event: OrderPlacedV1 = { version: 1, orderId, customerId, totalCents };
      await tx.insert(outbox).values({
        id: randomUUID(),
        aggregateType: 'order',
        aggregateId: orderId,
        eventType: 'OrderPlaced',
        payload: event,
      });
    });
    // No publishing here: walrelay publishes the event after the commit.
    return orderId;
  }
}
