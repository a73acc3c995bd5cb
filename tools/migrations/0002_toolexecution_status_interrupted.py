# A tool call whose worker stopped mid-call is recorded "interrupted" when its run is resumed.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tools", "0001_initial"),
    ]

    operations = [
        migrations.AlterField(
            model_name="toolexecution",
            name="status",
            field=models.CharField(
                choices=[
                    ("ok", "Ok"),
                    ("error", "Error"),
                    ("timeout", "Timeout"),
                    ("denied", "Denied"),
                    ("skipped", "Skipped"),
                    ("interrupted", "Interrupted"),
                ],
                max_length=16,
            ),
        ),
    ]
