package store

import (
	"errors"
	"fmt"
)

var (
	// ErrExists means a record with an equal or higher version is stored.
	ErrExists = errors.New("store: record exists with an equal or higher version")
	// ErrInvalid means a record's namespace or id is malformed.
	ErrInvalid = errors.New("store: invalid namespace or id")
	// ErrDuplicate means a PutBatch holds the same key more than once; the
	// first occurrence is written, later ones get this error.
	ErrDuplicate = errors.New("store: duplicate key in batch")
	// ErrTooLarge means one record alone exceeds Options.MaxTxnBytes.
	ErrTooLarge = errors.New("store: record larger than MaxTxnBytes")
	// ErrCorrupt means a stored key or value does not follow the layout.
	ErrCorrupt = errors.New("store: corrupt record")
	// ErrConfig means the Options are unusable.
	ErrConfig = errors.New("store: bad options")
	// ErrUncertain means a write's transaction failed in a way that leaves its outcome
	// unknown (a timeout, the connection lost after the request was sent): it may have
	// committed. Any other failure of a write is known not to have written.
	ErrUncertain = errors.New("store: write outcome unknown: it may have committed")
	// ErrFenced means a fenced write was refused: the writer's leadership term is over.
	ErrFenced = errors.New("store: fenced: this node's leadership has ended")
	// ErrNoLeader means no node holds leadership now.
	ErrNoLeader = errors.New("store: no leader")
	// ErrNodeTaken means a node name is registered under another live session's lease.
	ErrNodeTaken = errors.New("store: node name registered by another live process")
	// ErrConflict means a conditional write lost: what it was computed from changed
	// since it was read (another node wrote first). Read again and recompute.
	ErrConflict = errors.New("store: changed since read")
	// ErrClosed means the Store was closed.
	ErrClosed = errors.New("store: closed")
)

// ExistsError is the ErrExists of one record of a PutBatch: Stored is the record etcd
// holds, read in the same transaction, so that a caller can tell a retry of its own
// earlier write from another writer's.
type ExistsError struct{ Stored Record }

func (e *ExistsError) Error() string {
	return fmt.Sprintf("%v: %s/%s at version %d", ErrExists, e.Stored.Namespace, e.Stored.ID, e.Stored.Version)
}

// Is makes errors.Is(err, ErrExists) true.
func (e *ExistsError) Is(target error) bool { return target == ErrExists }
