# Issue 31: an invitation link carries an opaque random token, kept only as its hash. Links
# made before (a signed id and address) name no token here, so they stop working: inviting the
# address again sends a new link.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('workspaces', '0003_membership_is_reviewer'),
    ]

    operations = [
        migrations.AddField(
            model_name='invitation',
            name='token_hash',
            field=models.CharField(blank=True, db_index=True, max_length=64),
        ),
        migrations.AddField(
            model_name='invitation',
            name='token_issued_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddConstraint(
            model_name='invitation',
            constraint=models.UniqueConstraint(condition=models.Q(('token_hash', ''), _negated=True), fields=('token_hash',), name='invitation_token_unique'),
        ),
    ]
