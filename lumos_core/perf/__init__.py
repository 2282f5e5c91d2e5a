"""Performance models shared by what-ifs, synthetic jobs and summaries: GPU profiles (``hardware``) and
the time of kernels and collectives (``costs``)."""
