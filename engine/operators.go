package engine

import (
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/engine/internal/store"
)

// The operator's features: search, statistics, bulk actions (part of the
// facade, for the gateway, the root package and cmd/jetflow).

// Search selects jobs by id, tag, error and payload (part of Filter).
type Search = store.Search

// Limits of a search.
const (
	maxPayloadConditions = store.MaxPayloadConditions
	MaxSearchText        = store.MaxSearchText
)

// ContainsFold reports whether sub is in s, whatever the case.
func ContainsFold(s, sub string) bool { return store.ContainsFold(s, sub) }

// statsKeeper folds the event log into the statistics of the charts.
type statsKeeper = maintenance.StatsKeeper
