"""The live console at `/console`: `page` renders plain data to HTML (pure), `web` serves it."""
