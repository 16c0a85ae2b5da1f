"""The three-browser oracle: engines, case generators, the vote and the corpus store."""
