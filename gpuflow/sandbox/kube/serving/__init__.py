"""The test API server's HTTP side: the request handler (`handler`) and the routes it
parses (`routing`), watches (`watch`), kubectl's tables (`tables`), discovery
(`discovery`) and the server's options (`options`); `apiserver` serves them."""
