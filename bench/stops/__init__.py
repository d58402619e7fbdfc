"""`trilemma bench stops`: every way the app is stopped in the field, and what each leaves behind."""
