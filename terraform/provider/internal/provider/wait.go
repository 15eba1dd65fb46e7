package provider

import (
	"context"
	"fmt"
	"time"
)

// waitTimeout bounds how long a create, update or delete waits for the control plane
// to finish it (a topic's partitions made on the brokers, a tenant's identity, a
// mirror link's workers stopped). Terraform's interrupt cancels the context sooner.
const waitTimeout = 10 * time.Minute

var pollInterval = 500 * time.Millisecond

// waitFor calls check until it reports done or fails; it gives up after waitTimeout
// with what check last said.
func waitFor(ctx context.Context, what string, check func() (done bool, state string, err error)) error {
	deadline := time.Now().Add(waitTimeout)
	for {
		done, state, err := check()
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not done within %s (last: %s)", what, waitTimeout, state)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last: %s)", what, ctx.Err(), state)
		case <-time.After(pollInterval):
		}
	}
}

// waitGone waits until GET path answers 404: an object the API deletes after its
// answer (status deleting meanwhile) is gone.
func waitGone(ctx context.Context, c *Client, path string, query map[string][]string) error {
	return waitFor(ctx, "waiting for "+path+" to be deleted", func() (bool, string, error) {
		var body struct {
			Status       string `json:"status"`
			StatusReason string `json:"status_reason"`
		}
		err := c.Get(ctx, path, query, &body)
		if IsNotFound(err) {
			return true, "gone", nil
		}
		if err != nil {
			return false, "", err
		}
		return false, body.Status + " " + body.StatusReason, nil
	})
}
