// jetflow dashboard, the operator's pages (charts, failures, search, bulk
// actions, a fan-out's pieces, the live pause). app.js keeps the pages
// live; this file adds to them, page by page.
(function () {
  "use strict";
})();
