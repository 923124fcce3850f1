"""The book's helpers: what the pages read and draw: figures, the recorded suites each chapter quotes, and the counterparts and lanes the text compares."""
