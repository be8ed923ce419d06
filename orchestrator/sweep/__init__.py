"""From a config to cells: grid expansion, each cell's settings and checks, dataset files, the time request."""
