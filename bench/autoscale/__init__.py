"""`trilemma bench autoscale`: the autoscaler on a simulated bursty day and live on this machine."""
