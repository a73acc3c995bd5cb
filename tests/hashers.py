"""A password hasher for the tests' own process: Django's PBKDF2 at a thousand iterations.
Every test that makes a person hashes a password, and a million iterations (Django's) cost a
third of a second of CPU each: with thousands of people made, the suite spent minutes on them.
Its hashes are PBKDF2's own format (pbkdf2_sha256$1000$...), which the site's processes a test
starts (daphne, workers) verify with their default hasher, reading the iterations from the hash."""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1000
