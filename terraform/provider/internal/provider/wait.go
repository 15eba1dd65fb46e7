package provider

import (
	"context"
	"errors"
	"fmt"
	"time"
)

var pollInterval = 500 * time.Millisecond

// WaitInterruptedError is a wait that ended before the control plane finished: its time
// ran out, or Terraform was interrupted. The object is there, and a later apply waits
// for it again; it is not a failure of the object.
type WaitInterruptedError struct {
	What   string
	Reason string
	Last   string
}

func (e *WaitInterruptedError) Error() string {
	return fmt.Sprintf("%s: %s (last: %s)", e.What, e.Reason, e.Last)
}

// IsInterrupted says whether err is a wait that ended early (WaitInterruptedError).
func IsInterrupted(err error) bool {
	var interrupted *WaitInterruptedError
	return errors.As(err, &interrupted)
}

// waitFor calls check until it reports done or fails; it gives up after the client's
// wait timeout, or at ctx's end, with a WaitInterruptedError saying what check last said.
func (c *Client) waitFor(ctx context.Context, what string, check func() (done bool, state string, err error)) error {
	deadline := time.Now().Add(c.waitTimeout)
	last := "nothing read yet"
	for {
		done, state, err := check()
		if ctx.Err() != nil { // a check cut short by the interrupt says nothing of the object
			return &WaitInterruptedError{What: what, Reason: ctx.Err().Error(), Last: last}
		}
		if err != nil || done {
			return err
		}
		last = state
		if time.Now().After(deadline) {
			return &WaitInterruptedError{What: what, Reason: fmt.Sprintf("not done within %s", c.waitTimeout), Last: last}
		}
		select {
		case <-ctx.Done():
			return &WaitInterruptedError{What: what, Reason: ctx.Err().Error(), Last: last}
		case <-time.After(pollInterval):
		}
	}
}

// waitGone waits until GET path answers 404: an object the API deletes after its
// answer (status deleting meanwhile) is gone.
func waitGone(ctx context.Context, c *Client, path string, query map[string][]string) error {
	return c.waitFor(ctx, "waiting for "+path+" to be deleted", func() (bool, string, error) {
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
