"""The Kubernetes side of the operator: the API client (httpx over aiohttp, kopf login), its errors, the list+watch informer, the watch-fed cache and the ObjectStore over it."""
