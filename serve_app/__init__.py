"""Assembly, launch and the `trilemma` command: builds the app from the layers below and starts
it; the shipped configs live in configs/. Imported only by jobs/, bench/ and tests/."""
