"""``ragfunnel serve``: the library as a local HTTP service, with a web inspector (needs the [serve] extra)."""
