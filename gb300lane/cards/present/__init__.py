"""A card drawn for people: the markdown report, the HTML page and the write-up, with the figures both pages use."""
