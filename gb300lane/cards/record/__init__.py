"""The receipts directory of a card, typed: every file read back into its model, written once, sealed."""
