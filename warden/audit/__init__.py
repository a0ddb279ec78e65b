"""The append-only, tamper-evident audit log: records, Merkle tree, signed checkpoints, verification."""
