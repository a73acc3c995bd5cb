"""Each person's workspace: its directory, its quota, the path rules and walks that confine every
reader and writer to it, and the Files panel through which its person sees and changes it."""
