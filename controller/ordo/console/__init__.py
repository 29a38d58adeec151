"""`ordo console`: a web UI on 127.0.0.1 that shows Tasks, their steps, tool decisions,
children and approvals, and acts on approvals, under the user's own Kubernetes identity
(docs/console.md). `app` builds the Starlette app, `security` guards every request, `access`
reads and writes with the user's kubeconfig, `present` turns objects into what pages show,
`pages` renders them, `live` streams changes, `main` is the command."""
