"""The serving container's entrypoint: prepares the node for vLLM, forms the group, execs vLLM.

`spec` decides everything from the arguments and the environment (pure), `rendezvous` forms a
multi-node group with a clear error when a member is missing, `main` is the thin shell (checks,
rendezvous, exec). The command-line contract the operator renders is in `main`'s docstring.
"""
