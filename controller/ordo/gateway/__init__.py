"""`ordo gateway`: serves opted-in Agents over A2A (docs/a2a.md). Callers are Kubernetes
identities (TokenReview, SubjectAccessReview); an A2A task is an ordo Task."""
