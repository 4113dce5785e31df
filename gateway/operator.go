package gateway

import (
	"net/http"

	"github.com/jetflow/jetflow/commands"
)

// The operator's routes: charts (stats series), failures, search, bulk
// actions, a fan-out's pieces. Their handlers are in charts.go,
// failures.go, bulk.go and pieces.go.

// operatorRoutes registers the operator's API routes under v1.
func (g *Gateway) operatorRoutes(mux *http.ServeMux, v1 string) {
	read := commands.ActRead
	route(mux, v1+"/stats/series", methods{"GET": g.act(read, g.statsSeries)})
	route(mux, v1+"/jobs/{id}/pieces", methods{"GET": g.jobAct(read, g.listPieces)})
	// Each bulk action checks the role action it needs (bulkActions).
	route(mux, v1+"/jobs/bulk", methods{"POST": g.act(read, g.bulk)})
	route(mux, v1+"/bulk/{id}", methods{"GET": g.act(read, g.bulkStatus)})
}

// operatorPages registers the operator's dashboard pages.
func (g *Gateway) operatorPages(mux *http.ServeMux) {
	read := commands.ActRead
	route(mux, "/overview", methods{"GET": g.act(read, g.pageOverview)})
	route(mux, "/queues/{queue}", methods{"GET": g.act(read, g.pageQueue)})
	route(mux, "/failures", methods{"GET": g.act(read, g.pageFailures)})
}
