// TypeORM: the order and its event in dataSource.transaction.
import { randomUUID } from 'node:crypto';
import { Column, CreateDateColumn, DataSource, Entity, PrimaryColumn } from 'typeorm';

@Entity('orders')
export class Order {
  @PrimaryColumn('uuid') id!: string;
  @Column({ name: 'customer_id' }) customerId!: string;
  @Column({ name: 'total_cents', type: 'integer' }) totalCents!: number;
}

@Entity('outbox')
export class OutboxEvent {
  @PrimaryColumn('uuid') id!: string;
  @Column({ name: 'aggregate_type' }) aggregateType!: string;
  @Column({ name: 'aggregate_id' }) aggregateId!: string;
  @Column({ name: 'event_type' }) eventType!: string;
  @Column({ type: 'jsonb' }) payload!: Record<string, unknown>;
  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' }) createdAt!: Date;
}

export async function placeOrder(dataSource: DataSource, customerId: string, totalCents: number): Promise<string> {
  const orderId = randomUUID();
  await dataSource.transaction(async (manager) => {
    await manager.insert(Order, { id: orderId, customerId, totalCents });
    await manager.insert(OutboxEvent, {
      id: randomUUID(),
      aggregateType: 'order',
      aggregateId: orderId,
      eventType: 'OrderPlaced',
      payload: { version: 1, orderId, customerId, totalCents },
    });
  });
  return orderId;
}
