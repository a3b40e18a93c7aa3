"""Envoy's side of the gateway: the bootstrap it starts from, the Lua filters it runs, and the fast
path's routes and endpoints with the ADS server that sends them."""
