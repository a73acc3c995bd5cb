from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0024_agentrun_api_key"),
    ]

    operations = [
        migrations.AddField(
            model_name="agentrun",
            name="prelude",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
