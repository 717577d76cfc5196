// Prisma: the order and its event in one interactive transaction.
//
// schema.prisma (excerpt):
//   model Order  { id String @id @db.Uuid  customerId String @map("customer_id")  totalCents Int @map("total_cents")  @@map("orders") }
//   model Outbox { id String @id @db.Uuid  aggregateType String @map("aggregate_type")  aggregateId String @map("aggregate_id")
//                  eventType String @map("event_type")  payload Json  createdAt DateTime @default(now()) @map("created_at") @db.Timestamptz
//                  @@map("outbox") }
import { PrismaClient } from '@prisma/client';
import { randomUUID } from 'node:crypto';

const prisma = new PrismaClient();

export async function placeOrder(customerId: string, totalCents: number): Promise<string> {
  const orderId = randomUUID();
  await prisma.$transaction(async (tx) => {
    await tx.order.create({ data: { id: orderId, customerId, totalCents } });
    await tx.outbox.create({
      data: {
        id: randomUUID(),
        aggregateType: 'order',
        aggregateId: orderId,
        eventType: 'OrderPlaced',
        payload: { version: 1, orderId, customerId, totalCents },
      },
    });
  });
  return orderId;
}
