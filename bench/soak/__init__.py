"""`trilemma bench soak`: mixed load for a long while, and the memory of every serving process."""
