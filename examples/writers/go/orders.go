// Go with database/sql: the order and its event in one transaction.
package orders

import (
	"context"
	"database/sql"
	"encoding/json"

	"github.com/google/uuid"
)

// OrderPlacedV1 is version 1 of the event: what consumers need, not just an id.
type OrderPlacedV1 struct {
	Version    int    `json:"version"`
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	TotalCents int    `json:"total_cents"`
}

func PlaceOrder(ctx context.Context, db *sql.DB, customerID string, totalCents int) (string, error) {
	orderID := uuid.NewString()
	payload, err := json.Marshal(OrderPlacedV1{Version: 1, OrderID: orderID, CustomerID: customerID, TotalCents: totalCents})
	if err != nil {
		return "", err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer tx.Rollback() // a no-op after Commit

	if _, err := tx.ExecContext(ctx,
		`INSERT INTO orders (id, customer_id, total_cents) VALUES ($1, $2, $3)`,
		orderID, customerID, totalCents); err != nil {
		return "", err
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
		 VALUES ($1, 'order', $2, 'OrderPlaced', $3)`,
		uuid.NewString(), orderID, payload); err != nil {
		return "", err
	}
	// walrelay publishes the event after this commit, never before.
	return orderID, tx.Commit()
}
