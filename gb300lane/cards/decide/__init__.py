"""The decision: a card's gates over typed arm data, to gate results, looks and a verdict. Pure: it reads no file and
writes none; `cards.record` reads the receipts into the types it takes and writes what it returns.
"""
