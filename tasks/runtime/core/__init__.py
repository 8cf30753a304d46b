"""The runtime's bottom: what the task modules build on (contract, units, budget, ledger, locks,
provenance, resume, run folders). Nothing here imports execution or front."""
