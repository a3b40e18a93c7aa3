"""The gateway process: informers, the gRPC services Envoy calls (ext_proc, access log), engine
scrapes, the Redis quota store, the APIKey status writer and the HTTP port. Decisions are asked of
`decide`; nothing here holds a rule of its own."""
